/* The probe of the shared headers under abi/include (pshmem/abi.h, ring.h, state.h, types.h):
 * every size, offset and constant their Rust mirrors are compared with, by name. The headers'
 * own static asserts also run here, on the host compiler. */
#include "pshmem/abi.h"
#include "pshmem/ring.h"
#include "pshmem/state.h"
#include "pshmem/types.h"
#include "pshmem_probe.h"

PSHMEM_PROBE_TABLE(pshmem_abi_probe,
    /* abi.h */
    VAL(PSHMEM_AMO_FETCH_ADD), VAL(PSHMEM_AMO_ADD), VAL(PSHMEM_AMO_SWAP),
    VAL(PSHMEM_AMO_COMPARE_SWAP), VAL(PSHMEM_AMO_FETCH), VAL(PSHMEM_AMO_SET), VAL(PSHMEM_AMO_WIDE),
    VAL(PSHMEM_AMO_FETCH_AND), VAL(PSHMEM_AMO_AND), VAL(PSHMEM_AMO_FETCH_OR), VAL(PSHMEM_AMO_OR),
    VAL(PSHMEM_AMO_FETCH_XOR), VAL(PSHMEM_AMO_XOR),
    VAL(PSHMEM_SIGNAL_SET), VAL(PSHMEM_SIGNAL_ADD),
    VAL(PSHMEM_CMP_EQ), VAL(PSHMEM_CMP_NE), VAL(PSHMEM_CMP_GT), VAL(PSHMEM_CMP_LE),
    VAL(PSHMEM_CMP_LT), VAL(PSHMEM_CMP_GE),
    VAL(PSHMEM_RED_SUM), VAL(PSHMEM_RED_PROD), VAL(PSHMEM_RED_MIN), VAL(PSHMEM_RED_MAX),
    VAL(PSHMEM_RED_AND), VAL(PSHMEM_RED_OR), VAL(PSHMEM_RED_XOR),
    VAL(PSHMEM_DT_INT32), VAL(PSHMEM_DT_INT64), VAL(PSHMEM_DT_UINT64), VAL(PSHMEM_DT_FLOAT),
    VAL(PSHMEM_DT_DOUBLE), VAL(PSHMEM_DT_HALF), VAL(PSHMEM_DT_BFLOAT16), VAL(PSHMEM_DT_UINT32),
    VAL(PSHMEM_ERROR_PEER_DEAD), VAL(PSHMEM_ERROR_OP_FAILED), VAL(PSHMEM_ERROR_PROXY),
    VAL(PSHMEM_ERROR_BAD_ADDRESS), VAL(PSHMEM_ERROR_NO_CELLS), VAL(PSHMEM_ERROR_TIMEOUT),
    VAL(PSHMEM_ERROR_NO_PE), VAL(PSHMEM_ERROR_WORD(PSHMEM_ERROR_OP_FAILED, 7)),
    /* ring.h */
    SIZE(pshmem_slot_t), OFF(pshmem_slot_t, a), OFF(pshmem_slot_t, b), OFF(pshmem_slot_t, c),
    OFF(pshmem_slot_t, pe), OFF(pshmem_slot_t, ctrl),
    SIZE(pshmem_ring_ctrl_t), OFF(pshmem_ring_ctrl_t, head), OFF(pshmem_ring_ctrl_t, tail),
    OFF(pshmem_ring_ctrl_t, completed), OFF(pshmem_ring_ctrl_t, error),
    VAL(PSHMEM_OP_PUT), VAL(PSHMEM_OP_GET), VAL(PSHMEM_OP_P), VAL(PSHMEM_OP_AMO),
    VAL(PSHMEM_OP_SIGNAL), VAL(PSHMEM_OP_PUT_SIGNAL), VAL(PSHMEM_OP_FENCE),
    VAL(PSHMEM_OP_PUT_COUNTED), VAL(PSHMEM_OP_SIGNAL_COUNTED),
    VAL(PSHMEM_FLAG_RAW_LOCAL),
    VAL(PSHMEM_CTRL_MAKE(PSHMEM_OP_PUT_SIGNAL, PSHMEM_FLAG_RAW_LOCAL, PSHMEM_SIGNAL_ADD, 2)),
    VAL(PSHMEM_CTRL_COMMIT), VAL(PSHMEM_RING_COMMIT_BIT(5, 4)), VAL(PSHMEM_RING_COMMIT_BIT(9, 4)),
    VAL(PSHMEM_RING_MAX_SLOTS),
    SIZE(pshmem_ring_device_t), OFF(pshmem_ring_device_t, slots), OFF(pshmem_ring_device_t, ctrl),
    OFF(pshmem_ring_device_t, head), OFF(pshmem_ring_device_t, tail_cache),
    OFF(pshmem_ring_device_t, capacity),
    /* state.h */
    SIZE(pshmem_device_state_t), OFF(pshmem_device_state_t, my_pe),
    OFF(pshmem_device_state_t, n_pes), OFF(pshmem_device_state_t, heap_base),
    OFF(pshmem_device_state_t, heap_size), OFF(pshmem_device_state_t, peer_base),
    OFF(pshmem_device_state_t, ring), OFF(pshmem_device_state_t, cell_owner),
    OFF(pshmem_device_state_t, cells), OFF(pshmem_device_state_t, n_cells),
    OFF(pshmem_device_state_t, any_ring), OFF(pshmem_device_state_t, barrier_epoch),
    OFF(pshmem_device_state_t, barrier_off), OFF(pshmem_device_state_t, dev_error),
    OFF(pshmem_device_state_t, timeout_ns), OFF(pshmem_device_state_t, teams),
    OFF(pshmem_device_state_t, max_teams), OFF(pshmem_device_state_t, version),
    VAL(PSHMEM_STATE_VERSION), SIZE(pshmem_team_device_t), OFF(pshmem_team_device_t, size),
    OFF(pshmem_team_device_t, my_index), OFF(pshmem_team_device_t, members),
    OFF(pshmem_team_device_t, sync_off), OFF(pshmem_team_device_t, epoch),
    OFF(pshmem_team_device_t, scratch), OFF(pshmem_team_device_t, scratch_bytes),
    OFF(pshmem_team_device_t, ll_off), OFF(pshmem_team_device_t, ll_seq), VAL(PSHMEM_LL_BYTES),
)
