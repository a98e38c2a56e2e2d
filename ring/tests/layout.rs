//! The Rust mirror and the C header agree on every size, offset and constant (the C side as the
//! compiler sees it, through `pshmem-abi-probe`).

use std::mem::{offset_of, size_of};

use pshmem_abi_probe::value;
use pshmem_ring::layout::{
    CTRL_COMMIT, FLAG_RAW_LOCAL, MAX_SLOTS, RingCtrl, Slot, commit_bit, ctrl_make, op,
};

#[test]
fn c_and_rust_layouts_match() {
    let rust: Vec<(&str, u64)> = vec![
        ("sizeof pshmem_slot_t", size_of::<Slot>() as u64),
        ("pshmem_slot_t.a", offset_of!(Slot, a) as u64),
        ("pshmem_slot_t.b", offset_of!(Slot, b) as u64),
        ("pshmem_slot_t.c", offset_of!(Slot, c) as u64),
        ("pshmem_slot_t.pe", offset_of!(Slot, pe) as u64),
        ("pshmem_slot_t.ctrl", offset_of!(Slot, ctrl) as u64),
        ("sizeof pshmem_ring_ctrl_t", size_of::<RingCtrl>() as u64),
        ("pshmem_ring_ctrl_t.head", offset_of!(RingCtrl, head) as u64),
        ("pshmem_ring_ctrl_t.tail", offset_of!(RingCtrl, tail) as u64),
        (
            "pshmem_ring_ctrl_t.completed",
            offset_of!(RingCtrl, completed) as u64,
        ),
        (
            "pshmem_ring_ctrl_t.error",
            offset_of!(RingCtrl, error) as u64,
        ),
        ("PSHMEM_OP_PUT", op::PUT.into()),
        ("PSHMEM_OP_GET", op::GET.into()),
        ("PSHMEM_OP_P", op::P.into()),
        ("PSHMEM_OP_AMO", op::AMO.into()),
        ("PSHMEM_OP_SIGNAL", op::SIGNAL.into()),
        ("PSHMEM_OP_PUT_SIGNAL", op::PUT_SIGNAL.into()),
        ("PSHMEM_OP_FENCE", op::FENCE.into()),
        ("PSHMEM_OP_PUT_COUNTED", op::PUT_COUNTED.into()),
        ("PSHMEM_OP_SIGNAL_COUNTED", op::SIGNAL_COUNTED.into()),
        ("PSHMEM_FLAG_RAW_LOCAL", FLAG_RAW_LOCAL.into()),
        (
            "PSHMEM_CTRL_MAKE(PSHMEM_OP_PUT_SIGNAL, PSHMEM_FLAG_RAW_LOCAL, PSHMEM_SIGNAL_ADD, 2)",
            ctrl_make(
                op::PUT_SIGNAL,
                FLAG_RAW_LOCAL,
                pshmem_abi::SignalOp::Add.code(),
                2,
            )
            .into(),
        ),
        ("PSHMEM_CTRL_COMMIT", CTRL_COMMIT.into()),
        ("PSHMEM_RING_COMMIT_BIT(5, 4)", commit_bit(5, 4).into()),
        ("PSHMEM_RING_COMMIT_BIT(9, 4)", commit_bit(9, 4).into()),
        ("PSHMEM_RING_MAX_SLOTS", MAX_SLOTS.into()),
    ];
    for (name, v) in rust {
        assert_eq!(value(name), v, "{name}: C and Rust differ");
    }
}
