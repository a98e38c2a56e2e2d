//! Atomics, and ordering: quiet, fence, barrier.

use super::*;

impl Pshmem {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn amo<T: AmoElem>(
        &self,
        name: &'static str,
        dest: SymPtr,
        op: AmoOp,
        operand: T,
        compare: T,
        pe: usize,
    ) -> Result<T> {
        let route = self.check(name, pe, dest, T::SIZE as usize)?;
        self.check_aligned(name, dest, u64::from(T::SIZE))?;
        match route {
            Route::Direct(h) => h
                .amo(dest.0, T::WIDE, op, operand.to_bits(), compare.to_bits())
                .map(T::from_bits)
                .map_err(|e| self.mem_err(name, pe, e)),
            Route::Ring => {
                let mut cell = 0u64;
                let d = Desc::Amo {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    op,
                    wide: T::WIDE,
                    operand: operand.to_bits(),
                    compare: compare.to_bits(),
                    result: if op.fetches() {
                        std::ptr::addr_of_mut!(cell) as u64
                    } else {
                        0
                    },
                };
                if op.fetches() {
                    // The proxy writes `cell` before the operation completes, and we wait for
                    // that completion before `cell` goes out of scope.
                    self.push_wait(name, d)?;
                    // SAFETY: the completion's acquire ordered the proxy's write before this read.
                    let v = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(cell)) };
                    Ok(T::from_bits(v))
                } else {
                    self.push(name, d).map(|_| T::from_bits(0))
                }
            }
        }
    }

    /// Adds `value` to `dest` on `pe`; returns the old value.
    pub fn atomic_fetch_add<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<T> {
        self.amo("atomic_fetch_add", dest, AmoOp::FetchAdd, value, value, pe)
    }

    /// Adds `value` to `dest` on `pe` (complete after `quiet`).
    pub fn atomic_add<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        self.amo("atomic_add", dest, AmoOp::Add, value, value, pe)
            .map(|_| ())
    }

    /// Stores `value` at `dest` on `pe`; returns the old value.
    pub fn atomic_swap<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<T> {
        self.amo("atomic_swap", dest, AmoOp::Swap, value, value, pe)
    }

    /// Stores `value` at `dest` on `pe` if it equals `cond`; returns the old value.
    pub fn atomic_compare_swap<T: AmoElem>(
        &self,
        dest: SymPtr,
        cond: T,
        value: T,
        pe: usize,
    ) -> Result<T> {
        self.amo(
            "atomic_compare_swap",
            dest,
            AmoOp::CompareSwap,
            value,
            cond,
            pe,
        )
    }

    /// Reads `dest` on `pe` atomically.
    pub fn atomic_fetch<T: AmoElem>(&self, dest: SymPtr, pe: usize) -> Result<T> {
        self.amo(
            "atomic_fetch",
            dest,
            AmoOp::Fetch,
            T::from_bits(0),
            T::from_bits(0),
            pe,
        )
    }

    /// Stores `value` at `dest` on `pe` atomically (complete after `quiet`).
    pub fn atomic_set<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        self.amo("atomic_set", dest, AmoOp::Set, value, value, pe)
            .map(|_| ())
    }

    /// Any atomic: `op` on `dest` at `pe` with `operand` (and `compare` for compare-swap).
    /// Returns the old value for the fetching operations; the others return 0 and complete
    /// after `quiet`.
    pub fn atomic<T: AmoElem>(
        &self,
        op: AmoOp,
        dest: SymPtr,
        operand: T,
        compare: T,
        pe: usize,
    ) -> Result<T> {
        let name = match op {
            AmoOp::FetchAdd => "atomic_fetch_add",
            AmoOp::Add => "atomic_add",
            AmoOp::Swap => "atomic_swap",
            AmoOp::CompareSwap => "atomic_compare_swap",
            AmoOp::Fetch => "atomic_fetch",
            AmoOp::Set => "atomic_set",
            AmoOp::FetchAnd => "atomic_fetch_and",
            AmoOp::And => "atomic_and",
            AmoOp::FetchOr => "atomic_fetch_or",
            AmoOp::Or => "atomic_or",
            AmoOp::FetchXor => "atomic_fetch_xor",
            AmoOp::Xor => "atomic_xor",
        };
        self.amo(name, dest, op, operand, compare, pe)
    }

    /// Completes every operation this PE issued (on every ring): after it, their effects are
    /// visible at their targets.
    pub fn quiet(&self) -> Result<()> {
        self.live("quiet")?;
        self.quiet_inner("quiet")
    }

    pub(crate) fn quiet_inner(&self, op: &'static str) -> Result<()> {
        let limit = self.limit();
        for p in &self.producers {
            p.quiet(&limit).map_err(|e| self.ring_err(op, e))?;
        }
        // Direct stores are complete once issued; the fence orders them before what follows.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.health.faulted() {
            self.halt_proxies();
            return Err(self.fault_err(op, code::PROXY, None));
        }
        Ok(())
    }

    /// Orders this thread's operations: those to a PE issued after the fence land after those
    /// to that PE before it.
    pub fn fence(&self) -> Result<()> {
        self.live("fence")?;
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.peers.iter().any(Option::is_none) {
            self.push("fence", Desc::Fence)?;
        }
        Ok(())
    }

    /// Waits until every PE arrives, with every PE's earlier operations complete. Collective.
    pub fn barrier_all(&self) -> Result<()> {
        self.live("barrier_all")?;
        self.barrier_inner("barrier_all")
    }
}
