//! The CUDA driver API, loaded at run time from `libcuda.so.1` (`nvcuda.dll` on Windows) with
//! `libloading`: the few functions GPU time per span needs (feature `cuda`). Nothing NVIDIA is
//! needed to build, and a machine without a driver reads as "no CUDA".
//!
//! Handles (`CUevent`, `CUstream`) are kept as `usize`: spanprof never dereferences them, and
//! they cross threads (an event recorded on the program's thread is queried on spanprof's).

// The one place spanprof calls C: the driver's functions through pointers looked up by name.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::fmt;

use libloading::Library;

/// The library [`Driver::load`] opens by default.
pub(crate) const DEFAULT_LIBRARY: &str = if cfg!(windows) {
    "nvcuda.dll"
} else {
    "libcuda.so.1"
};

/// `CUresult`.
type CuResult = c_int;
const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_NOT_READY`: an event's work has not completed.
const CUDA_ERROR_NOT_READY: CuResult = 600;
/// `CU_EVENT_DEFAULT`: timing on, blocking sync off.
const CU_EVENT_DEFAULT: c_uint = 0;

type Handle = *mut c_void;

/// The driver's functions used, looked up once.
#[derive(Clone, Copy)]
struct Functions {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    event_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(Handle, Handle) -> CuResult,
    event_query: unsafe extern "C" fn(Handle) -> CuResult,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, Handle, Handle) -> CuResult,
    event_destroy: unsafe extern "C" fn(Handle) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

/// A loaded and initialised CUDA driver.
pub(crate) struct Driver {
    f: Functions,
    library: String,
    /// Keeps the functions' code mapped (declared last: dropped after everything else).
    _lib: Library,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// What [`Driver::query`] found of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Query {
    /// The work before it completed.
    Done,
    /// Still queued or running.
    NotReady,
    /// The driver reported an error (`CUresult`).
    Failed(i32),
}

/// A driver call that failed: the function and its `CUresult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallError {
    pub(crate) function: &'static str,
    pub(crate) code: i32,
}

impl Driver {
    /// Loads `library` (a path, or a name for the library search path), looks up the functions
    /// and calls `cuInit(0)`. The error is the reason, for one log line.
    pub(crate) fn load(library: &OsStr) -> Result<Self, String> {
        let name = library.to_string_lossy().into_owned();
        // SAFETY: loading a library runs its initialisers; the CUDA driver's (and the test
        // fake's) have no preconditions.
        let lib = unsafe { Library::new(library) }
            .map_err(|e| format!("CUDA driver library not loaded ({name}): {e}"))?;
        let f = Self::functions(&lib).map_err(|e| format!("{name} is not a CUDA driver: {e}"))?;
        let driver = Driver {
            f,
            library: name,
            _lib: lib,
        };
        // SAFETY: `cuInit` takes flags (0) and may be called more than once.
        let code = unsafe { (driver.f.init)(0) };
        if code != CUDA_SUCCESS {
            return Err(format!(
                "CUDA driver not usable ({}): cuInit: {}",
                driver.library,
                driver.error_text(code)
            ));
        }
        Ok(driver)
    }

    fn functions(lib: &Library) -> Result<Functions, libloading::Error> {
        /// The first of `names` the library exports (`_v2` names first, where the driver
        /// has them).
        ///
        /// SAFETY (of each use): the type given is the function's C signature in `cuda.h`.
        unsafe fn first<T: Copy>(lib: &Library, names: &[&[u8]]) -> Result<T, libloading::Error> {
            let mut err = None;
            for name in names {
                match lib.get::<T>(name) {
                    Ok(f) => return Ok(*f),
                    Err(e) => err = Some(e),
                }
            }
            // UNWRAP: `names` is never empty.
            Err(err.expect("a name"))
        }
        // SAFETY: each signature is the one `cuda.h` declares for the symbol.
        unsafe {
            Ok(Functions {
                init: first(lib, &[b"cuInit\0"])?,
                ctx_get_current: first(lib, &[b"cuCtxGetCurrent\0"])?,
                event_create: first(lib, &[b"cuEventCreate\0"])?,
                event_record: first(lib, &[b"cuEventRecord\0"])?,
                event_query: first(lib, &[b"cuEventQuery\0"])?,
                event_elapsed_time: first(lib, &[b"cuEventElapsedTime\0"])?,
                event_destroy: first(lib, &[b"cuEventDestroy_v2\0", b"cuEventDestroy\0"])?,
                get_error_string: first(lib, &[b"cuGetErrorString\0"])?,
            })
        }
    }

    /// Whether this thread has a current CUDA context.
    pub(crate) fn has_context(&self) -> bool {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer.
        let code = unsafe { (self.f.ctx_get_current)(&mut ctx) };
        code == CUDA_SUCCESS && !ctx.is_null()
    }

    /// A new event with timing on, in this thread's current context.
    pub(crate) fn create_event(&self) -> Result<usize, CallError> {
        let mut event: Handle = std::ptr::null_mut();
        // SAFETY: `event` is a valid out-pointer; the flags are a valid `CUevent_flags`.
        let code = unsafe { (self.f.event_create)(&mut event, CU_EVENT_DEFAULT) };
        check("cuEventCreate", code).map(|()| event as usize)
    }

    /// Records `event` on `stream` (0: the legacy default stream).
    #[inline]
    pub(crate) fn record(&self, event: usize, stream: usize) -> Result<(), CallError> {
        // SAFETY: `event` came from `create_event` and is not destroyed; the driver checks the
        // stream handle the program gave (an invalid one is an error, not a crash, for
        // handles of destroyed streams it may not be: the program's contract, as with its own
        // launches on that stream).
        let code = unsafe { (self.f.event_record)(event as Handle, stream as Handle) };
        check("cuEventRecord", code)
    }

    /// Whether the work recorded before `event` completed (never blocks).
    pub(crate) fn query(&self, event: usize) -> Query {
        // SAFETY: `event` came from `create_event` and is not destroyed.
        match unsafe { (self.f.event_query)(event as Handle) } {
            CUDA_SUCCESS => Query::Done,
            CUDA_ERROR_NOT_READY => Query::NotReady,
            code => Query::Failed(code),
        }
    }

    /// The time between two completed events, ns (the driver's resolution: about 0.5 µs).
    pub(crate) fn elapsed_ns(&self, start: usize, end: usize) -> Result<u64, CallError> {
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; both events came from `create_event`.
        let code = unsafe { (self.f.event_elapsed_time)(&mut ms, start as Handle, end as Handle) };
        check("cuEventElapsedTime", code)?;
        Ok(ms_to_ns(ms))
    }

    /// Destroys an event (errors ignored: nothing to do about them).
    pub(crate) fn destroy(&self, event: usize) {
        // SAFETY: `event` came from `create_event` and is destroyed once.
        let _ = unsafe { (self.f.event_destroy)(event as Handle) };
    }

    /// The driver's text for `code`, with the code.
    pub(crate) fn error_text(&self, code: i32) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer; on success it points to a static C string.
        let ok = unsafe { (self.f.get_error_string)(code, &mut text) } == CUDA_SUCCESS;
        if ok && !text.is_null() {
            // SAFETY: a NUL-terminated static string from the driver.
            let s = unsafe { CStr::from_ptr(text) }.to_string_lossy();
            format!("{s} (CUresult {code})")
        } else {
            format!("CUresult {code}")
        }
    }
}

fn check(function: &'static str, code: CuResult) -> Result<(), CallError> {
    if code == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CallError { function, code })
    }
}

/// `cuEventElapsedTime`'s milliseconds in ns, rounded (an `f32`'s ms are not exact in ns).
fn ms_to_ns(ms: f32) -> u64 {
    let ns = f64::from(ms) * 1e6;
    if ns.is_finite() && ns > 0.0 {
        ns.round() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_become_nanoseconds_rounded() {
        assert_eq!(ms_to_ns(10.0), 10_000_000);
        assert_eq!(ms_to_ns(0.002), 2_000);
        assert_eq!(ms_to_ns(1.5), 1_500_000);
        assert_eq!(ms_to_ns(-1.0), 0);
        assert_eq!(ms_to_ns(f32::NAN), 0);
    }

    #[test]
    fn a_missing_library_is_a_reason_not_a_panic() {
        let e = Driver::load(OsStr::new("/nonexistent/libcuda.so.1")).unwrap_err();
        assert!(
            e.starts_with("CUDA driver library not loaded (/nonexistent/libcuda.so.1)"),
            "{e}"
        );
    }
}
