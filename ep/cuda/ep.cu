/* The MoE kernels of pshmem-ep (pshmem/ep/ll.cuh, pshmem/ep/ht.cuh), one entry point each, each
 * taking one argument struct of ll.h or ht.h by value; loaded by ep/src/lib.rs through the
 * runtime (`Gpu::load`), which fills this module's pshmem_dstate.
 * Two blocks per SM at least (64 registers a thread): blocks that wait for peers hold their
 * SM, and with several PEs on one GPU (MPS) the peers' kernels need the rest. */
#include "pshmem/ep/ll.cuh"

extern "C" __global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2)
    pshmem_ep_ll_dispatch_send(const pshmem_ep_ll_args_t a) {
    pshmem_ep::dispatch_send(a);
}

extern "C" __global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2)
    pshmem_ep_ll_dispatch_recv(const pshmem_ep_ll_args_t a) {
    pshmem_ep::dispatch_recv(a);
}

extern "C" __global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2)
    pshmem_ep_ll_combine_send(const pshmem_ep_ll_args_t a) {
    pshmem_ep::combine_send(a);
}

extern "C" __global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2)
    pshmem_ep_ll_combine_recv(const pshmem_ep_ll_args_t a) {
    pshmem_ep::combine_recv(a);
}

extern "C" __global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2)
    pshmem_ep_ll_clean(const pshmem_ep_ll_clean_args_t a) {
    pshmem_ep::clean(a.sig, a.words);
}

/* The high-throughput (normal) mode's kernels (pshmem/ep/ht.cuh). */
#include "pshmem/ep/ht.cuh"

#define PSHMEM_EP_HT_KERNEL(name)                                                                \
    extern "C" __global__ void __launch_bounds__(PSHMEM_EP_HT_THREADS, 2)                       \
        pshmem_ep_ht_##name(const pshmem_ep_ht_args_t a) {                                      \
        pshmem_ep_ht::name(a);                                                                   \
    }
PSHMEM_EP_HT_KERNEL(layout)
PSHMEM_EP_HT_KERNEL(reset)
PSHMEM_EP_HT_KERNEL(prefix)
PSHMEM_EP_HT_KERNEL(notify)
PSHMEM_EP_HT_KERNEL(dispatch)
PSHMEM_EP_HT_KERNEL(combine)
