/* device_host/nvshmem_tensor.h — proxyshmem's NVSHMEM compatibility tree: NVSHMEM's tile API
 * (nvshmemx::Tensor, tile_allgather, tile_*_allreduce / _reduce, tile_collective_wait) is not
 * provided. Every algorithm of NVSHMEM 3.4's tile collectives is an NVLink SHARP (multicast)
 * one, and multicast is off on the machines this project runs on (compat/nvshmem/README.md,
 * "NVSHMEM names not provided"): a program that includes this header is refused here, at
 * compile time, rather than failing when it runs. */
#error "proxyshmem does not provide NVSHMEM's tile API (device_host/nvshmem_tensor.h): its collectives need NVLink multicast (NVLS); see compat/nvshmem/README.md"
