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

/// spanprof as `builder` configures it, with traces by `backend` into `dir`: one file per
/// `step` span if given, else the whole run; in a registry with the trace layer.
pub fn spanprof_traced(
    builder: spanprof::Builder,
    backend: spanprof::chrome::TraceBackend,
    dir: &std::path::Path,
    step: Option<&str>,
) -> (Dispatch, spanprof::ProfileGuard) {
    use spanprof::chrome::{ChromeOptions, Schedule};
    let mut options = ChromeOptions::dir(dir).with_backend(backend);
    if let Some(step) = step {
        options = options.with_steps(step, Schedule::every_step());
    }
    let (layer, guard) = builder
        .with_env(false)
        .with_report(spanprof::ReportTarget::Off)
        .with_chrome(options)
        .build()
        .expect("spanprof builds");
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(guard.chrome_layer());
    (Dispatch::new(subscriber), guard)
}
