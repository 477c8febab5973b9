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
