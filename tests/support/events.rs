//! The events spanprof logs on any thread (its export thread logs through the global default
//! subscriber), captured as text fields; tests that read them run one at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use tracing_subscriber::prelude::*;
use tracing_subscriber::Layer;

/// The fields of one event, as text (`message` included).
pub type Fields = HashMap<String, String>;

/// The events at `spanprof::perf` logged since [`capture`] was called.
pub type Captured = Arc<Mutex<Vec<Fields>>>;

struct Capture(Captured);

struct Text<'a>(&'a mut Fields);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == spanprof::PERF_TARGET {
            let mut fields = Fields::new();
            fields.insert("level".into(), event.metadata().level().to_string());
            event.record(&mut Text(&mut fields));
            self.0.lock().unwrap().push(fields);
        }
    }
}

/// Starts capturing (the capture is emptied) and holds the lock that runs such tests one at a
/// time, until the returned guard drops.
pub fn capture() -> (MutexGuard<'static, ()>, Captured) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    let lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let captured = CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        tracing_subscriber::registry()
            .with(Capture(captured.clone()))
            .init();
        captured
    });
    captured.lock().unwrap().clear();
    (lock, captured.clone())
}

/// The captured events that have field `field`.
pub fn with_field(captured: &Captured, field: &str) -> Vec<Fields> {
    captured
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.contains_key(field))
        .cloned()
        .collect()
}

/// Waits (at most a minute: a bound, not a measurement) until `ready` holds.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
