/* proxyshmem device API, the umbrella: include it in a .cu file, load the module through the
 * runtime (`Gpu::load`, which fills `pshmem_dstate`), and call these functions from kernels.
 * Names and semantics follow NVSHMEM's device API without a context argument
 * (pshmem_ ~ nvshmem_, pshmemx_ ~ nvshmemx_). One header per topic:
 *
 *   abi.h          codes shared with the host (AMO, signal, comparison, error words)
 *   ring.h         the command ring's layout            ring_device.cuh  its GPU producer
 *   state.h        the device state's layout            state.cuh        the state, errors, waits
 *   ptx.cuh        the PTX loads, stores and registers the others use
 *   rma.cuh        put, get, p, g                       signal.cuh       signals, waits
 *   amo.cuh        atomics                              sync.cuh         fence, quiet, barrier
 *   counted.cuh    counted puts and signals (many puts, one signal, any fabric)
 *
 * Routing, per call: a PE whose heap this GPU maps (itself, and same-host peers opened through
 * CUDA IPC) is reached by loads and stores (NVLink or PCIe peer access); any other PE — another
 * host, or every peer under PSHMEM_DISABLE_P2P=1 — through the command ring and the proxy.
 *
 * Memory ordering:
 * - direct stores to a peer are made visible system-wide by __threadfence_system() (fence,
 *   quiet) or by the release of a signal store (st.release.sys / red.release.sys): a peer that
 *   observes the signal with an acquire load then sees the data;
 * - ring operations are ordered per target PE by the proxy (fence pushes a FENCE descriptor)
 *   and finish when `ctrl->completed` passes them (quiet); a signal of put_signal is applied
 *   by the target after the data (see proxy/src/engine);
 * - every wait (ring space, quiet, waits, barrier) also watches the ring's error word, which
 *   the proxy raises when a peer dies or an operation fails, and PSHMEM_OP_TIMEOUT: no wait
 *   hangs (state.cuh).
 */
#ifndef PSHMEM_DEVICE_CUH
#define PSHMEM_DEVICE_CUH

#include "pshmem/state.cuh"
#include "pshmem/rma.cuh"
#include "pshmem/signal.cuh"
#include "pshmem/amo.cuh"
#include "pshmem/sync.cuh"
#include "pshmem/coll.cuh"
#include "pshmem/counted.cuh"

#endif /* PSHMEM_DEVICE_CUH */
