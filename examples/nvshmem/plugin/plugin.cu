/* A shared library in the style of a PyTorch CUDA extension: built with nvcc -shared, it
 * includes the device API, so it carries its own device state, and it is loaded with dlopen
 * after the application initialized the runtime. Its state registers itself when the library
 * loads; the runtime fills it at the library's first host call (here nvshmem_my_pe). */
#include <nvshmem.h>
#include <nvshmemx.h>

__global__ void plugin_put(int *dest, int value, int pe) {
    nvshmem_int_p(dest, value, pe);
    nvshmem_quiet();
}

/* Puts 100 + this PE's number into dest on the next PE; returns the CUDA error. */
extern "C" int plugin_send(int *dest, cudaStream_t s) {
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    plugin_put<<<1, 1, 0, s>>>(dest, 100 + me, (me + 1) % n);
    return (int)cudaGetLastError();
}
