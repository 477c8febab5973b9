//! GPU time per span from CUDA events (feature `cuda`): the stream a thread's spans are timed
//! on.
//!
//! Spans chosen by [`Builder::with_gpu_spans`](crate::Builder::with_gpu_spans) (or
//! `SPANPROF_GPU_SPANS`) get a CUDA event recorded on the thread's stream when they are
//! entered and another when they are exited; spanprof's own thread reads the time between the
//! two once the GPU has reached the second one. That time is the stream's: the kernels and
//! copies queued in the span, plus any gap while the stream waited for the CPU to queue more.
//! See the guide, `docs/resources-and-gpu.md`, "GPU time per span".
//!
//! The stream is the one set with [`set_stream`] on the thread entering the span, else the
//! legacy default stream (`NULL`). The handle is the raw `CUstream` of the CUDA driver API (what
//! cudarc's `CudaStream::cu_stream()` returns, or a runtime `cudaStream_t`): spanprof depends on
//! no CUDA wrapper crate, so the version of cudarc a framework pins does not matter.
//!
//! ```
//! # fn forward() {}
//! // let raw = stream.cu_stream() as usize;   // cudarc
//! let raw = 0usize; // the legacy default stream
//! let _on = spanprof::cuda::set_stream(raw);
//! let _s = tracing::info_span!("forward").entered();
//! forward();
//! ```

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

thread_local! {
    /// The stream this thread's chosen spans are timed on (0: the legacy default stream).
    static STREAM: Cell<usize> = const { Cell::new(0) };
}

/// Times the spans this thread enters on `stream`, a raw `CUstream` handle (0: the legacy
/// default stream), until the guard is dropped; the stream set before is then restored.
///
/// A span is timed on the stream in force when it is entered: both its events are recorded on
/// that stream, even if the stream changes before its exit. The guard stays on its thread.
pub fn set_stream(stream: usize) -> StreamGuard {
    let previous = STREAM.with(|s| s.replace(stream));
    StreamGuard {
        previous,
        _not_send: PhantomData,
    }
}

/// The stream this thread's chosen spans are timed on now (0: the legacy default stream).
pub fn current_stream() -> usize {
    STREAM.with(Cell::get)
}

/// Restores the stream set before [`set_stream`] when dropped.
#[must_use = "the stream is restored when the guard is dropped: `let _ = ` restores it at once"]
pub struct StreamGuard {
    previous: usize,
    /// The setting is per thread: the guard restores it on the thread that set it.
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("previous", &format_args!("{:#x}", self.previous))
            .finish()
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        // At thread exit the slot may be gone: nothing to restore then.
        let _ = STREAM.try_with(|s| s.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_scoped_and_restored() {
        assert_eq!(current_stream(), 0);
        {
            let _a = set_stream(0x1000);
            assert_eq!(current_stream(), 0x1000);
            {
                let _b = set_stream(0x2000);
                assert_eq!(current_stream(), 0x2000);
            }
            assert_eq!(current_stream(), 0x1000);
            std::thread::spawn(|| assert_eq!(current_stream(), 0))
                .join()
                .unwrap();
        }
        assert_eq!(current_stream(), 0);
    }
}
