//! The symmetric heaps: collective allocation (every PE's call compared), the host heap's
//! `malloc`/`align`/`calloc`/`free` and local reads, the GPU heap's allocations.

use super::*;

impl Pshmem {
    pub(crate) fn bs(&self, op: &'static str) -> Result<MutexGuard<'_, Option<Bootstrap>>> {
        let g = lock(&self.bs);
        if g.is_none() {
            return Err(Error::Finalized { me: self.me, op });
        }
        Ok(g)
    }

    /// Checks that every PE made the same collective call (`rec`); `describe` renders one.
    pub(crate) fn agree(
        &self,
        op: &'static str,
        rec: &[u8],
        describe: impl Fn(&[u8]) -> String,
    ) -> Result<()> {
        let all = {
            let g = self.bs(op)?;
            g.as_ref().expect("bootstrap").allgather(rec)?
        };
        match differences(&all, describe) {
            Some(detail) => Err(Error::CollectiveMismatch {
                me: self.me,
                op,
                detail,
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn allocate(
        &self,
        op: &'static str,
        size: u64,
        align: u64,
        zero: bool,
    ) -> Result<SymPtr> {
        self.allocate_in(&self.alloc, op, size, align, |at, len| {
            if !zero {
                return Ok(());
            }
            let zeros = vec![0u8; len as usize];
            // SAFETY: `zeros` is a live buffer of `len` bytes.
            unsafe { self.mem.write_from_raw(at, zeros.as_ptr(), zeros.len()) }
                .map_err(|e| self.mem_err(op, self.me, e))
        })
    }

    /// A collective allocation from `alloc`; `prepare` runs on the new block (at, len) before
    /// the PEs compare their calls.
    pub(crate) fn allocate_in(
        &self,
        alloc: &Mutex<Allocator>,
        op: &'static str,
        size: u64,
        align: u64,
        prepare: impl FnOnce(u64, u64) -> Result<()>,
    ) -> Result<SymPtr> {
        self.live(op)?;
        let mut a = lock(alloc);
        let at = a.alloc(size, align);
        if let Some(at) = at {
            // Before the collective check: once any PE returns, peers may write here.
            prepare(at, a.size_of(at).unwrap_or(0))?;
        }
        let rec = [1u64, size, align, at.unwrap_or(u64::MAX)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        let agreed = self.agree(op, &rec, describe_alloc);
        if let Err(e) = agreed {
            if let Some(at) = at {
                a.free(at);
            }
            return Err(e);
        }
        match at {
            Some(at) => Ok(SymPtr(at)),
            None => Err(Error::HeapExhausted {
                me: self.me,
                op,
                raise: if std::ptr::eq(alloc, &self.alloc) {
                    "PSHMEM_SYMMETRIC_SIZE"
                } else {
                    "PSHMEM_GPU_SYMMETRIC_SIZE, or NVSHMEM_SYMMETRIC_SIZE when that is unset"
                },
                requested: size,
                largest_free: a.largest_free(),
            }),
        }
    }

    /// Allocates `size` bytes of GPU symmetric memory (256-byte aligned). Collective.
    pub fn gpu_malloc(&self, size: usize) -> Result<SymPtr> {
        let g = self.gpu()?;
        self.allocate_in(&g.alloc, "gpu_malloc", size as u64, 256, |_, _| Ok(()))
    }

    /// Allocates `size` zeroed bytes of GPU symmetric memory. Collective.
    pub fn gpu_calloc(&self, size: usize) -> Result<SymPtr> {
        let g = self.gpu()?;
        self.allocate_in(&g.alloc, "gpu_calloc", size as u64, 256, |at, len| {
            g.zero(at, len as usize)
        })
    }

    /// Frees GPU symmetric memory. Collective; no kernel may still use it.
    pub fn gpu_free(&self, p: SymPtr) -> Result<()> {
        let g = self.gpu()?;
        self.live("gpu_free")?;
        let mut a = lock(&g.alloc);
        let known = a.size_of(p.0).is_some();
        let rec = [3u64, p.0, u64::from(known)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        self.agree("gpu_free", &rec, describe_free)?;
        if !known {
            return Err(Error::BadFree {
                me: self.me,
                offset: p.0,
            });
        }
        a.free(p.0);
        Ok(())
    }

    /// Allocates `size` bytes of symmetric memory (64-byte aligned). Collective: every PE
    /// must call it with the same size, in the same order.
    pub fn malloc(&self, size: usize) -> Result<SymPtr> {
        self.allocate("malloc", size as u64, alloc::MIN_ALIGN, false)
    }

    /// Allocates `size` bytes aligned to `alignment` (a power of two). Collective.
    pub fn align(&self, alignment: usize, size: usize) -> Result<SymPtr> {
        if !alignment.is_power_of_two() {
            return Err(Error::BadAlignment {
                me: self.me,
                op: "align",
                align: alignment,
            });
        }
        self.allocate("align", size as u64, alignment as u64, false)
    }

    /// Allocates `count * size` zeroed bytes. Collective.
    pub fn calloc(&self, count: usize, size: usize) -> Result<SymPtr> {
        let total = count.checked_mul(size).ok_or(Error::SizeOverflow {
            me: self.me,
            op: "calloc",
            count,
            size,
        })?;
        self.allocate("calloc", total as u64, alloc::MIN_ALIGN, true)
    }

    /// Frees an allocation. Collective: completes this PE's operations first, and every PE must
    /// free the same address in the same order.
    pub fn free(&self, p: SymPtr) -> Result<()> {
        self.live("free")?;
        self.quiet_inner("free")?;
        let mut a = lock(&self.alloc);
        let known = a.size_of(p.0).is_some();
        let rec = [2u64, p.0, u64::from(known)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        self.agree("free", &rec, describe_free)?;
        if !known {
            return Err(Error::BadFree {
                me: self.me,
                offset: p.0,
            });
        }
        a.free(p.0);
        Ok(())
    }

    /// This PE's address of a symmetric object.
    pub fn ptr(&self, p: SymPtr) -> *mut u8 {
        self.mem.base().wrapping_add(p.0 as usize)
    }

    /// The address of `pe`'s copy of a symmetric object, if this PE maps it directly
    /// (same host, direct path enabled); as `nvshmem_ptr`.
    pub fn peer_ptr(&self, p: SymPtr, pe: usize) -> Option<*mut u8> {
        self.peers
            .get(pe)
            .copied()
            .flatten()
            .map(|h| h.base().wrapping_add(p.0 as usize))
    }

    /// Reads this PE's copy of a symmetric value (an atomic load for aligned 32/64-bit values).
    pub fn local_read<T: AmoElem>(&self, p: SymPtr) -> Result<T> {
        self.check_range("local_read", p, T::SIZE as usize)?;
        self.check_aligned("local_read", p, u64::from(T::SIZE))?;
        let v = self
            .mem
            .load(p.0, T::WIDE)
            .map_err(|e| self.mem_err("local_read", self.me, e))?;
        Ok(T::from_bits(v))
    }

    /// Copies bytes out of this PE's copy of symmetric memory.
    pub fn local_copy_out(&self, p: SymPtr, dst: &mut [u8]) -> Result<()> {
        self.check_range("local_copy_out", p, dst.len())?;
        // SAFETY: `dst` is a live exclusive buffer of its length.
        unsafe { self.mem.read_to_raw(p.0, dst.as_mut_ptr(), dst.len()) }
            .map_err(|e| self.mem_err("local_copy_out", self.me, e))
    }

    /// Copies bytes into this PE's copy of symmetric memory.
    pub fn local_copy_in(&self, p: SymPtr, src: &[u8]) -> Result<()> {
        self.check_range("local_copy_in", p, src.len())?;
        // SAFETY: `src` is a live buffer of its length.
        unsafe { self.mem.write_from_raw(p.0, src.as_ptr(), src.len()) }
            .map_err(|e| self.mem_err("local_copy_in", self.me, e))
    }
}

/// `None` if every PE's record is the same; otherwise which PEs differ from PE 0, and how.
pub(crate) fn differences(all: &[Vec<u8>], describe: impl Fn(&[u8]) -> String) -> Option<String> {
    let first = all.first()?;
    let odd: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| *r != first)
        .map(|(pe, r)| format!("PE {pe}: {}", describe(r)))
        .collect();
    (!odd.is_empty()).then(|| format!("PE 0: {}; {}", describe(first), odd.join("; ")))
}

pub(crate) fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
        .collect()
}

pub(crate) fn describe_alloc(b: &[u8]) -> String {
    let w = words(b);
    match w.as_slice() {
        [1, size, align, at] => {
            let at = if *at == u64::MAX {
                "no room".to_string()
            } else {
                format!("offset {at}")
            };
            format!("allocation of {size} bytes aligned {align} -> {at}")
        }
        [2, off, _] => format!("free of offset {off}"),
        _ => "another collective".into(),
    }
}

pub(crate) fn describe_free(b: &[u8]) -> String {
    let w = words(b);
    match w.as_slice() {
        [2, off, known] => format!(
            "free of offset {off}{}",
            if *known == 1 { "" } else { " (not allocated)" }
        ),
        _ => describe_alloc(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn differences_name_the_odd_pe() {
        let a = vec![vec![1u8, 2], vec![1, 2], vec![1, 3]];
        let d = differences(&a, |b| format!("{b:?}")).unwrap();
        assert!(d.contains("PE 2: [1, 3]"), "{d}");
        assert!(differences(&a[..2], |b| format!("{b:?}")).is_none());
    }
}
