/* The MoE kernels of pshmem-ep (pshmem/ep/ll.cuh, pshmem/ep/ht.cuh), one entry point each, each
 * taking one argument struct of ll.h or ht.h by value; loaded by ep/src/lib.rs through the
 * runtime (`Gpu::load`), which fills this module's pshmem_dstate.
 * Two blocks per SM at least (64 registers a thread): blocks that wait for peers hold their
 * SM, and with several PEs on one GPU (MPS) the peers' kernels need the rest. */
#include "pshmem/ep/ll.cuh"

/* One kernel per operation, its phases chosen per launch (ll.h). Named as DeepEP's users'
 * profiling helpers look for them: one kernel whose name contains "dispatch" (resp.
 * "combine"), as "::dispatch<" in the demangled name; so C++ templates in a namespace, loaded
 * by their mangled names (ep/src/lib.rs, `LL_KERNELS`). */
namespace pshmem_ep {
namespace ll {
template <typename Args>
__global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2) dispatch(const Args a) {
    run<dispatch_send, dispatch_recv>(a);
}

template <typename Args>
__global__ void __launch_bounds__(PSHMEM_EP_THREADS, 2) combine(const Args a) {
    run<combine_send, combine_recv>(a);
}

template __global__ void dispatch<pshmem_ep_ll_args_t>(const pshmem_ep_ll_args_t);
template __global__ void combine<pshmem_ep_ll_args_t>(const pshmem_ep_ll_args_t);
} // namespace ll
} // namespace pshmem_ep

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
