//! What the `ratios` and `instructions` benches share: the subscribers they measure.

use tracing::Dispatch;
use tracing_subscriber::prelude::*;

/// spanprof as `builder` configures it (environment ignored, no report), in a registry.
pub fn spanprof(builder: spanprof::Builder) -> (Dispatch, spanprof::ProfileGuard) {
    let (layer, guard) = builder
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .build()
        .expect("spanprof builds");
    (
        Dispatch::new(tracing_subscriber::registry().with(layer)),
        guard,
    )
}

/// The floor: the registry with a layer that does nothing.
pub fn floor() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(tracing_subscriber::layer::Identity::new()))
}

/// spanprof as `builder` configures it, with traces of every `bench_round` span by `backend`
/// into `dir` (one file per round), in a registry with the trace layer.
#[allow(dead_code)] // the `ratios` bench only
pub fn spanprof_traced(
    builder: spanprof::Builder,
    backend: spanprof::chrome::TraceBackend,
    dir: &std::path::Path,
) -> (Dispatch, spanprof::ProfileGuard) {
    use spanprof::chrome::{ChromeOptions, Schedule};
    let (layer, guard) = builder
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .with_chrome(
            ChromeOptions::dir(dir)
                .with_backend(backend)
                .with_steps("bench_round", Schedule::every_step()),
        )
        .build()
        .expect("spanprof builds");
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(guard.chrome_layer());
    (Dispatch::new(subscriber), guard)
}
