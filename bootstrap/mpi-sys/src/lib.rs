//! # pshmem-mpi-sys
//!
//! The MPI library that the program has already loaded, found at run time, so that
//! `libpshmem` and the Python package join a job over the program's own MPI without any
//! link-time MPI dependency (and without choosing one MPI for the user). Only what the
//! bootstrap needs: whether MPI is initialised, a communicator's rank and size, and a broadcast
//! of bytes (rank 0's unique id).
//!
//! MPI's C ABI differs between implementations in exactly the two things used here besides
//! plain `int`s: a communicator and a datatype are pointers in Open MPI (`MPI_COMM_WORLD` is
//! the address of `ompi_mpi_comm_world`) and `int`s in MPICH and the implementations that keep
//! its ABI (Intel MPI, MVAPICH, Cray MPICH), with fixed values for the predefined handles
//! (`mpi.h`: `MPI_COMM_WORLD` 0x44000000, `MPI_BYTE` 0x4c00010d). [`Mpi::find`] tells them
//! apart by Open MPI's exported object, then by `MPI_Get_library_version`, and refuses an
//! implementation it does not know rather than guess a handle's width.

use std::ffi::{CStr, c_char, c_int, c_void};

use thiserror::Error;

/// Shared-object names tried (already loaded only: `RTLD_NOLOAD`) when the program's MPI is
/// not in the global symbol scope (e.g. Python modules loaded with `RTLD_LOCAL`).
const SONAMES: [&CStr; 6] = [
    c"libmpi.so.40",
    c"libmpi.so.12",
    c"libmpich.so.12",
    c"libmpi.so",
    c"libmpi_abi.so.0",
    c"libmpich.so",
];

/// `MPI_COMM_WORLD` and `MPI_BYTE` in MPICH's ABI.
const MPICH_COMM_WORLD: c_int = 0x4400_0000;
const MPICH_BYTE: c_int = 0x4c00_010d;
/// `MPI_SUCCESS`.
const SUCCESS: c_int = 0;
/// `MPI_MAX_LIBRARY_VERSION_STRING` is 256 in Open MPI and 8192 in MPICH: the larger.
const VERSION_LEN: usize = 8192;

/// How this MPI spells its handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// Open MPI: handles are pointers to library objects.
    OpenMpi,
    /// MPICH and its ABI family: handles are `int`s.
    Mpich,
}

/// A communicator handle, as the library spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comm {
    /// An Open MPI `MPI_Comm` (the address of its communicator object).
    Ptr(usize),
    /// An MPICH-ABI `MPI_Comm`.
    Int(c_int),
}

/// A failed MPI call, or an MPI this crate cannot drive.
#[derive(Debug, Error)]
pub enum MpiError {
    /// An MPI function returned an error code.
    #[error("{call} returned MPI error {code}")]
    Call {
        /// The function.
        call: &'static str,
        /// Its return value.
        code: c_int,
    },
    /// The library lacks a function this crate needs.
    #[error("the MPI library in this process has no {0}")]
    Missing(&'static str),
    /// The library's handles are of a kind this crate does not know.
    #[error(
        "unknown MPI implementation ({0}): only Open MPI and MPICH-ABI libraries are supported"
    )]
    Unknown(String),
    /// A value outside what the call takes.
    #[error("{0}")]
    Invalid(String),
}

type Flag = unsafe extern "C" fn(*mut c_int) -> c_int;
type Version = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;

/// The functions whose handle arguments have the library's width.
#[derive(Debug, Clone, Copy)]
enum Calls {
    Ptr {
        rank: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
        size: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
        bcast: unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, c_int, *mut c_void) -> c_int,
        world: usize,
        byte: usize,
    },
    Int {
        rank: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
        size: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
        bcast: unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, c_int) -> c_int,
    },
}

/// The program's MPI library.
#[derive(Debug, Clone)]
pub struct Mpi {
    abi: Abi,
    version: String,
    initialized: Flag,
    finalized: Flag,
    calls: Calls,
}

/// Where symbols are looked up: the global scope, or one already-loaded library.
#[derive(Clone, Copy)]
struct Scope(*mut c_void);

impl Scope {
    /// The address of `name`, or `None`.
    fn sym(self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: `self.0` is RTLD_DEFAULT or a handle dlopen returned (never closed: the
        // program keeps its MPI loaded); `name` is NUL-terminated.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// The global scope if it has MPI, else the first already-loaded MPI library.
    fn find() -> Option<Self> {
        let global = Scope(libc::RTLD_DEFAULT);
        if global.sym(c"MPI_Initialized").is_some() {
            return Some(global);
        }
        SONAMES.iter().find_map(|so| {
            // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded (running
            // no initialiser); the name is NUL-terminated.
            let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            let s = Scope(h);
            (!h.is_null() && s.sym(c"MPI_Initialized").is_some()).then_some(s)
        })
    }
}

/// Looks up `name` in `s` as a function of type `F`.
///
/// # Safety
/// `F` must be the C signature of the function `name` in this MPI library.
unsafe fn func<F: Copy>(s: Scope, name: &'static CStr) -> Result<F, MpiError> {
    let p = s.sym(name).ok_or(MpiError::Missing(static_name(name)))?;
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: a function pointer has the size of a data pointer on the platforms libpshmem
    // supports (checked above in debug builds); the caller vouches for the signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn static_name(name: &'static CStr) -> &'static str {
    name.to_str().unwrap_or("an MPI function")
}

fn check(call: &'static str, code: c_int) -> Result<(), MpiError> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(MpiError::Call { call, code })
    }
}

impl Mpi {
    /// The MPI library loaded in this process; `Ok(None)` if there is none.
    pub fn find() -> Result<Option<Self>, MpiError> {
        let Some(s) = Scope::find() else {
            return Ok(None);
        };
        // SAFETY: these are MPI's C signatures (MPI standard, section 11 and 9): `int
        // MPI_Initialized(int *)`, `int MPI_Finalized(int *)`, `int
        // MPI_Get_library_version(char *, int *)`, identical in every implementation.
        let (initialized, finalized, version): (Flag, Flag, Version) = unsafe {
            (
                func(s, c"MPI_Initialized")?,
                func(s, c"MPI_Finalized")?,
                func(s, c"MPI_Get_library_version")?,
            )
        };
        let version = library_version(version)?;
        let open_mpi = s.sym(c"ompi_mpi_comm_world");
        let calls = if let Some(world) = open_mpi {
            let byte = s
                .sym(c"ompi_mpi_byte")
                .ok_or(MpiError::Missing("ompi_mpi_byte"))?;
            // SAFETY: Open MPI's signatures, with `MPI_Comm` and `MPI_Datatype` pointers
            // (its mpi.h: `typedef struct ompi_communicator_t *MPI_Comm;`).
            unsafe {
                Calls::Ptr {
                    rank: func(s, c"MPI_Comm_rank")?,
                    size: func(s, c"MPI_Comm_size")?,
                    bcast: func(s, c"MPI_Bcast")?,
                    world: world as usize,
                    byte: byte as usize,
                }
            }
        } else if ["MPICH", "Intel", "MVAPICH", "CRAY MPICH"]
            .iter()
            .any(|m| version.contains(m))
        {
            // SAFETY: MPICH's signatures, with `int` handles (its mpi.h: `typedef int
            // MPI_Comm;`, `typedef int MPI_Datatype;`).
            unsafe {
                Calls::Int {
                    rank: func(s, c"MPI_Comm_rank")?,
                    size: func(s, c"MPI_Comm_size")?,
                    bcast: func(s, c"MPI_Bcast")?,
                }
            }
        } else {
            return Err(MpiError::Unknown(first_line(&version)));
        };
        let abi = match calls {
            Calls::Ptr { .. } => Abi::OpenMpi,
            Calls::Int { .. } => Abi::Mpich,
        };
        Ok(Some(Self {
            abi,
            version,
            initialized,
            finalized,
            calls,
        }))
    }

    /// Its handle kind.
    pub fn abi(&self) -> Abi {
        self.abi
    }

    /// The first line of its `MPI_Get_library_version`.
    pub fn version(&self) -> String {
        first_line(&self.version)
    }

    /// Whether MPI is initialised and not yet finalised (the only state in which the other
    /// calls may be made).
    pub fn active(&self) -> Result<bool, MpiError> {
        let (mut init, mut fin) = (0, 0);
        // SAFETY: both take a pointer to one writable int; callable before MPI_Init and after
        // MPI_Finalize (MPI standard).
        unsafe {
            check("MPI_Initialized", (self.initialized)(&mut init))?;
            check("MPI_Finalized", (self.finalized)(&mut fin))?;
        }
        Ok(init != 0 && fin == 0)
    }

    /// `MPI_COMM_WORLD`.
    pub fn world(&self) -> Comm {
        match self.calls {
            Calls::Ptr { world, .. } => Comm::Ptr(world),
            Calls::Int { .. } => Comm::Int(MPICH_COMM_WORLD),
        }
    }

    /// The communicator stored at `at` (an `MPI_Comm *`, as `nvshmemx_init_attr_t::mpi_comm`
    /// holds).
    ///
    /// # Safety
    /// `at` must point to a readable `MPI_Comm` of this library.
    pub unsafe fn comm_at(&self, at: *const c_void) -> Comm {
        match self.calls {
            // SAFETY: the caller vouches for a readable MPI_Comm, a pointer in Open MPI.
            Calls::Ptr { .. } => Comm::Ptr(unsafe { at.cast::<usize>().read_unaligned() }),
            // SAFETY: as above, an int in MPICH's ABI.
            Calls::Int { .. } => Comm::Int(unsafe { at.cast::<c_int>().read_unaligned() }),
        }
    }

    /// This process's rank in `comm` and the communicator's size.
    pub fn rank_size(&self, comm: Comm) -> Result<(usize, usize), MpiError> {
        self.require_active()?;
        let (mut r, mut n) = (-1, -1);
        match (self.calls, comm) {
            // SAFETY: MPI_Comm_rank/size with this library's handle kind and one writable int
            // each; MPI is active (checked above).
            (Calls::Ptr { rank, size, .. }, Comm::Ptr(c)) => unsafe {
                check("MPI_Comm_rank", rank(c as *mut c_void, &mut r))?;
                check("MPI_Comm_size", size(c as *mut c_void, &mut n))?;
            },
            // SAFETY: as above, int handles.
            (Calls::Int { rank, size, .. }, Comm::Int(c)) => unsafe {
                check("MPI_Comm_rank", rank(c, &mut r))?;
                check("MPI_Comm_size", size(c, &mut n))?;
            },
            _ => return Err(self.wrong_kind(comm)),
        }
        match (usize::try_from(r), usize::try_from(n)) {
            (Ok(r), Ok(n)) if r < n => Ok((r, n)),
            _ => Err(MpiError::Invalid(format!(
                "MPI_Comm_rank/size gave rank {r} of {n} (is the communicator MPI_COMM_NULL?)"
            ))),
        }
    }

    /// Broadcasts `buf` from `root` over `comm` (collective over the communicator).
    pub fn bcast(&self, comm: Comm, buf: &mut [u8], root: usize) -> Result<(), MpiError> {
        self.require_active()?;
        let len = c_int::try_from(buf.len())
            .map_err(|_| MpiError::Invalid(format!("{} bytes to broadcast", buf.len())))?;
        let root = c_int::try_from(root)
            .map_err(|_| MpiError::Invalid(format!("broadcast root {root}")))?;
        let p = buf.as_mut_ptr().cast::<c_void>();
        let code = match (self.calls, comm) {
            // SAFETY: `buf` is valid for `len` bytes of MPI_BYTE for the whole (blocking)
            // call; the handles are this library's.
            (Calls::Ptr { bcast, byte, .. }, Comm::Ptr(c)) => unsafe {
                bcast(p, len, byte as *mut c_void, root, c as *mut c_void)
            },
            // SAFETY: as above, int handles.
            (Calls::Int { bcast, .. }, Comm::Int(c)) => unsafe {
                bcast(p, len, MPICH_BYTE, root, c)
            },
            _ => return Err(self.wrong_kind(comm)),
        };
        check("MPI_Bcast", code)
    }

    fn require_active(&self) -> Result<(), MpiError> {
        if self.active()? {
            Ok(())
        } else {
            Err(MpiError::Invalid(
                "MPI is not initialised (or already finalised): call MPI_Init first".into(),
            ))
        }
    }

    fn wrong_kind(&self, comm: Comm) -> MpiError {
        MpiError::Invalid(format!(
            "communicator {comm:?} is not a handle of {:?} ({})",
            self.abi,
            self.version()
        ))
    }
}

/// `MPI_Get_library_version`'s text.
fn library_version(f: Version) -> Result<String, MpiError> {
    let mut buf = vec![0u8; VERSION_LEN];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING bytes of every implementation
    // (8192 is MPICH's, the largest); callable before MPI_Init.
    check("MPI_Get_library_version", unsafe {
        f(buf.as_mut_ptr().cast(), &mut len)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary links no MPI, and no library is loaded: nothing is found (the paths
    /// that drive a real MPI run under mpirun in `capi/tests/mpi.rs`).
    #[test]
    fn a_process_without_mpi_finds_none() {
        assert!(Mpi::find().expect("no error without MPI").is_none());
    }
}
