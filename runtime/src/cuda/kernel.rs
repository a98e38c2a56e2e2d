//! The one way proxyshmem launches a kernel. Every kernel takes one parameter, a plain C struct
//! declared in a header beside the kernel (`abi/include/pshmem/kernel_args.h` for the runtime's
//! own; `ep/include/pshmem/ep/*.h`, `tests/cuda/args.h`, `benches/cuda/perf_args.h` for the
//! others), passed by value. Its Rust mirror is declared with [`kernel_args!`](crate::kernel_args),
//! which makes it `#[repr(C)]` and lists its fields, so that each crate's tests compare every
//! field with the C compiler's view of the header (`pshmem-abi-probe`). A [`Kernel`] is typed by
//! that struct: a launcher cannot pass arguments of another kernel, and a loaded kernel whose
//! parameter does not have the struct's size is refused when it is loaded.

use std::{ffi::c_void, marker::PhantomData, sync::Arc};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, sys};

use super::{CudaError, check, driver};

/// A kernel's argument struct.
///
/// # Safety
/// The implementor is `#[repr(C)]` and has exactly the layout of the C struct `C_NAME`, which
/// is the one parameter of the kernels launched with it; `FIELDS` lists every field with its
/// offset. Declare it with [`kernel_args!`](crate::kernel_args), and compare it with the C
/// header in a test.
pub unsafe trait KernelArgs: Copy {
    /// The C type the kernel takes (`"void"`: no parameter).
    const C_NAME: &'static str;
    /// Every field's C name and offset.
    const FIELDS: &'static [(&'static str, usize)];
}

// SAFETY: no parameter at all; launched with no parameter array.
unsafe impl KernelArgs for () {
    const C_NAME: &'static str = "void";
    const FIELDS: &'static [(&'static str, usize)] = &[];
}

/// Declares a kernel's argument struct: `#[repr(C)]`, `Copy`, `Default`, with its C name and
/// fields for [`KernelArgs`]. Pointers are `u64` device (or mapped host) addresses; padding
/// fields are written out, as in the C struct.
///
/// ```ignore
/// pshmem::kernel_args! {
///     /// `pshmem_k_team_sync_args_t`.
///     pub struct TeamSyncArgs = "pshmem_k_team_sync_args_t" { pub team: i32, pub barrier: i32 }
/// }
/// ```
#[macro_export]
macro_rules! kernel_args {
    ($(#[$m:meta])* $vis:vis struct $name:ident = $c:literal {
        $($(#[$fm:meta])* $fv:vis $f:ident : $t:ty),+ $(,)?
    }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $name { $($(#[$fm])* $fv $f: $t),+ }

        // SAFETY: `repr(C)`; every field is listed, and the probe tests compare each with the
        // C struct's.
        unsafe impl $crate::cuda::KernelArgs for $name {
            const C_NAME: &'static str = $c;
            const FIELDS: &'static [(&'static str, usize)] =
                &[$((stringify!($f), ::std::mem::offset_of!($name, $f))),+];
        }
    };
}

/// A kernel of a loaded module, typed by its argument struct.
pub struct Kernel<A: KernelArgs> {
    f: CudaFunction,
    ctx: Arc<CudaContext>,
    name: &'static str,
    _args: PhantomData<fn(A)>,
}

impl<A: KernelArgs> std::fmt::Debug for Kernel<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("args", &A::C_NAME)
            .finish()
    }
}

impl<A: KernelArgs> Kernel<A> {
    /// Kernel `name` of `module` (loaded in `ctx`), checked to take exactly one parameter of
    /// `A`'s size (none for `()`) where the driver can say (`cuFuncGetParamInfo`, CUDA 12.4).
    pub fn load(
        ctx: &Arc<CudaContext>,
        module: &Arc<CudaModule>,
        name: &'static str,
    ) -> Result<Self, CudaError> {
        let f = module.load_function(name).map_err(driver(name))?;
        check_params::<A>(&f, name)?;
        Ok(Self {
            f,
            ctx: ctx.clone(),
            name,
            _args: PhantomData,
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Launches the kernel on `grid` (x, y) blocks of `threads` threads on `stream`, with
    /// `args` as its parameter (copied at launch).
    ///
    /// # Safety
    /// Every memory the kernel reaches through `args` stays valid (and what it writes, unused
    /// by anything else) until it has run on `stream`; `stream` is a stream of the kernel's
    /// context (or null: the legacy default stream).
    pub unsafe fn launch(
        &self,
        (gx, gy): (u32, u32),
        threads: u32,
        stream: sys::CUstream,
        args: A,
    ) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the context (cuCtxSetCurrent)"))?;
        let mut a = args;
        let mut params: [*mut c_void; 1] = [(&mut a as *mut A).cast()];
        let params = if size_of::<A>() == 0 {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        // SAFETY: the kernel takes one parameter of `A`'s layout (`KernelArgs`' contract,
        // checked by size at load), which lives until the call returns (the driver copies it);
        // the memory behind it is the caller's to keep valid.
        let rc = unsafe {
            sys::cuLaunchKernel(
                self.f.cu_function(),
                gx.max(1),
                gy.max(1),
                1,
                threads,
                1,
                1,
                0,
                stream,
                params,
                std::ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel")
    }
}

/// Refuses a kernel whose parameters are not exactly one of `A`'s size (none for `()`).
fn check_params<A: KernelArgs>(f: &CudaFunction, name: &'static str) -> Result<(), CudaError> {
    // SAFETY: only looks the symbol up (cudarc's loader panics on a missing symbol, so its
    // presence is checked first: drivers before CUDA 12.4 lack it).
    let present = unsafe { sys::culib().get::<unsafe extern "C" fn()>(b"cuFuncGetParamInfo\0") };
    if present.is_err() {
        return Ok(());
    }
    let info = |i: usize| {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: out-pointers to live locals; `f` is a loaded function.
        let rc = unsafe { sys::cuFuncGetParamInfo(f.cu_function(), i, &mut off, &mut size) };
        (rc == sys::CUresult::CUDA_SUCCESS).then_some(size)
    };
    let want = (size_of::<A>() > 0).then_some(size_of::<A>());
    let (first, second) = (info(0), info(1));
    if first == want && second.is_none() {
        return Ok(());
    }
    Err(CudaError::Unusable(format!(
        "kernel {name} takes parameters of {first:?} bytes (and a second: {}), its launcher \
         passes {} ({want:?} bytes): the kernel and its argument struct disagree",
        second.is_some(),
        A::C_NAME
    )))
}
