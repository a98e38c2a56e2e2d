/* The probe of pshmem-perf's kernels' arguments (cuda/perf_args.h): every field, for the
 * mirror test of src/kargs.rs. */
#include "perf_args.h"
#include "pshmem_probe.h"

PSHMEM_PROBE_TABLE(pshmem_benches_probe,
    SIZE(perf_bw_args_t), OFF(perf_bw_args_t, dst), OFF(perf_bw_args_t, src),
    OFF(perf_bw_args_t, size), OFF(perf_bw_args_t, reps), OFF(perf_bw_args_t, pe),
    OFF(perf_bw_args_t, get), OFF(perf_bw_args_t, _pad), SIZE(perf_p_pingpong_args_t),
    OFF(perf_p_pingpong_args_t, flag), OFF(perf_p_pingpong_args_t, base),
    OFF(perf_p_pingpong_args_t, ns), OFF(perf_p_pingpong_args_t, iters),
    OFF(perf_p_pingpong_args_t, me), SIZE(perf_amo_args_t), OFF(perf_amo_args_t, word),
    OFF(perf_amo_args_t, ns), OFF(perf_amo_args_t, iters), OFF(perf_amo_args_t, pe),
    SIZE(perf_msg_rate_args_t), OFF(perf_msg_rate_args_t, dst),
    OFF(perf_msg_rate_args_t, per_thread), OFF(perf_msg_rate_args_t, pe),
    SIZE(perf_barrier_args_t), OFF(perf_barrier_args_t, ns), OFF(perf_barrier_args_t, iters),
    OFF(perf_barrier_args_t, _pad), SIZE(perf_spin_args_t), OFF(perf_spin_args_t, ns),
    SIZE(perf_coll_args_t), OFF(perf_coll_args_t, dest), OFF(perf_coll_args_t, src),
    OFF(perf_coll_args_t, n), OFF(perf_coll_args_t, ns), OFF(perf_coll_args_t, kind),
    OFF(perf_coll_args_t, iters),
)
