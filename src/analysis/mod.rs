//! Analyses of a profile: functions of a [`Snapshot`](crate::profile::Snapshot) that return
//! structured findings. They read nothing but the snapshot, so a saved profile is analysed
//! exactly as the live one was; outputs (and the `spanprof` command) turn the findings into
//! words.
//!
//! - [`leaks`]: span names suspected of leaking memory (a figure of the model every report
//!   shows, [`crate::profile::leaks`], named here too);
//! - [`compare`]: baseline runs against new runs, with regressions beyond the noise;
//! - [`top`]: the bottlenecks of one profile.

mod compare;
mod top;

pub use crate::profile::leaks::{
    leaks, Leak, LeakSource, LEAK_MIN_CALLS, LEAK_MIN_HEAP_BYTES, LEAK_MIN_RSS_BYTES,
    LEAK_MIN_SHARE,
};
pub use compare::{
    compare, Budget, BudgetCheck, CompareOptions, Comparison, Count, CountChange, Evidence,
    Measure, Neighbour, Rule, RunWide, Side, TimingChange, Verdict,
};
pub use top::{
    top, Finding, ALLOCATIONS_MIN_BYTES_PER_CALL, ALLOCATIONS_MIN_CALLS, ALLOCATIONS_MIN_PER_CALL,
    ALLOCATIONS_MIN_SHARE_PCT, DOMINANT_SELF_SHARE_PCT, FINDINGS_PER_KIND, GPU_BOUND_MIN_CALLS,
    GPU_BOUND_RATIO, GPU_IDLE_MIN_WALL_SHARE_PCT, GPU_IDLE_PCT, HEAVY_TAIL_MIN_CALLS,
    HEAVY_TAIL_MIN_SHARE_PCT, HEAVY_TAIL_RATIO, HOT_PATH_MIN_SHARE_PCT,
    INSTRUMENTATION_MIN_RUN_SHARE_PCT, INSTRUMENTATION_MIN_SHARE_PCT,
};
