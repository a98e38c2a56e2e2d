//! The Rust mirror and the C header agree on every size, offset and constant.

use std::mem::{offset_of, size_of};

use pshmem_gpu_queue::layout::{
    self, CTRL_COMMIT, FLAG_RAW_LOCAL, MAX_SLOTS, RingCtrl, Slot, amo, commit_bit, ctrl_make, op,
    signal,
};

#[test]
fn c_and_rust_layouts_match() {
    let rust: Vec<u64> = vec![
        size_of::<Slot>() as u64,
        offset_of!(Slot, a) as u64,
        offset_of!(Slot, b) as u64,
        offset_of!(Slot, c) as u64,
        offset_of!(Slot, pe) as u64,
        offset_of!(Slot, ctrl) as u64,
        size_of::<RingCtrl>() as u64,
        offset_of!(RingCtrl, head) as u64,
        offset_of!(RingCtrl, tail) as u64,
        offset_of!(RingCtrl, completed) as u64,
        offset_of!(RingCtrl, error) as u64,
        op::PUT.into(),
        op::GET.into(),
        op::P.into(),
        op::AMO.into(),
        op::SIGNAL.into(),
        op::PUT_SIGNAL.into(),
        op::FENCE.into(),
        amo::FETCH_ADD.into(),
        amo::ADD.into(),
        amo::SWAP.into(),
        amo::COMPARE_SWAP.into(),
        amo::FETCH.into(),
        amo::SET.into(),
        amo::WIDE.into(),
        signal::SET.into(),
        signal::ADD.into(),
        FLAG_RAW_LOCAL.into(),
        ctrl_make(op::PUT_SIGNAL, FLAG_RAW_LOCAL, signal::ADD, 2).into(),
        CTRL_COMMIT.into(),
        commit_bit(5, 4).into(),
        commit_bit(9, 4).into(),
        MAX_SLOTS.into(),
        layout::error::PEER_DEAD.into(),
        layout::error::OP_FAILED.into(),
        layout::error::PROXY.into(),
    ];
    assert_eq!(pshmem_gpu_queue::probe::values(), rust);
}
