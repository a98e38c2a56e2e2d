//! DLPack (v0.8 ABI, the `dltensor` capsule every framework accepts): how a range of a
//! symmetric heap becomes a `torch.Tensor` without a copy. The capsule owns only the tensor's
//! description (shape, strides); the memory stays the heap's, freed by `pshmem.free` (a
//! collective) or at finalize, never by a consumer's deleter. The descriptions alive are
//! counted per runtime ([`end_runtime`]): finalize keeps the heaps mapped while any tensor
//! still views them.

use std::{
    collections::BTreeMap,
    ffi::{CStr, c_void},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use pyo3::{ffi, prelude::*};

/// `DLDevice`.
#[repr(C)]
struct Device {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor`.
#[repr(C)]
struct Managed {
    tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Managed)>,
}

/// What `manager_ctx` owns: the arrays `shape` and `strides` point into, and the runtime the
/// tensor views.
struct Dims {
    shape: Vec<i64>,
    strides: Vec<i64>,
    epoch: u64,
}

/// `kDLCPU`, `kDLCUDA`.
pub(crate) const CPU: i32 = 1;
pub(crate) const CUDA: i32 = 2;

const NAME: &CStr = c"dltensor";

/// Which runtime of this process tensors made now view (each finalize starts the next).
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Per runtime, tensor descriptions made and not yet deleted: tensors (or unconsumed capsules)
/// that view its heaps.
static LIVE: Mutex<BTreeMap<u64, usize>> = Mutex::new(BTreeMap::new());

fn live_map() -> std::sync::MutexGuard<'static, BTreeMap<u64, usize>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many tensors still view the heaps of the current runtime; the next tensors made belong
/// to the next runtime (finalize calls this once).
pub(crate) fn end_runtime() -> usize {
    let epoch = EPOCH.fetch_add(1, Ordering::AcqRel);
    live_map().get(&epoch).copied().unwrap_or(0)
}

/// The managed tensor's deleter: frees the description (the consumer calls it once).
unsafe extern "C" fn delete(m: *mut Managed) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its `manager_ctx` were made by `Box::into_raw` in `capsule`, and DLPack
    // consumers call the deleter exactly once.
    let dims = unsafe {
        let m = Box::from_raw(m);
        Box::from_raw(m.manager_ctx.cast::<Dims>())
    };
    let mut live = live_map();
    if let Some(n) = live.get_mut(&dims.epoch) {
        *n -= 1;
        if *n == 0 {
            live.remove(&dims.epoch);
        }
    }
}

/// The capsule's destructor: frees the tensor when no consumer took it (a consumer renames the
/// capsule to `used_dltensor` and owns the tensor from then on).
unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: `cap` is the capsule being destroyed (called by Python with the GIL held).
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()).cast::<Managed>();
            if let Some(d) = (*m).deleter {
                d(m);
            }
        }
    }
}

/// A description of a tensor at `data`.
pub(crate) struct Desc {
    pub data: u64,
    pub device_type: i32,
    pub device_id: i32,
    /// DLPack type code (`kDLInt` 0, `kDLUInt` 1, `kDLFloat` 2, `kDLBfloat` 4, `kDLBool` 6).
    pub code: u8,
    pub bits: u8,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
}

/// A `dltensor` capsule describing `d`.
///
/// # Safety
/// `d.data` with its shape, strides and element size must lie in memory that stays mapped for
/// as long as the consumer's tensor lives (a symmetric heap, or a peer's heap mapped until
/// finalize: finalize keeps them mapped while [`end_runtime`] counts a tensor).
pub(crate) unsafe fn capsule(py: Python<'_>, d: Desc) -> PyResult<Bound<'_, PyAny>> {
    let epoch = EPOCH.load(Ordering::Acquire);
    let mut dims = Box::new(Dims {
        shape: d.shape,
        strides: d.strides,
        epoch,
    });
    let tensor = Tensor {
        data: d.data as *mut c_void,
        device: Device {
            device_type: d.device_type,
            device_id: d.device_id,
        },
        ndim: dims.shape.len() as i32,
        dtype: DataType {
            code: d.code,
            bits: d.bits,
            lanes: 1,
        },
        shape: dims.shape.as_mut_ptr(),
        strides: dims.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let m = Box::into_raw(Box::new(Managed {
        tensor,
        manager_ctx: Box::into_raw(dims).cast(),
        deleter: Some(delete),
    }));
    *live_map().entry(epoch).or_insert(0) += 1;
    // SAFETY: `m` is a live DLManagedTensor; the destructor frees it unless a consumer took it.
    let cap = unsafe { ffi::PyCapsule_New(m.cast(), NAME.as_ptr(), Some(capsule_destructor)) };
    if cap.is_null() {
        // SAFETY: no capsule owns `m`: free it here.
        unsafe { delete(m) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}
