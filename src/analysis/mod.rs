//! Analyses of a profile: functions of a [`Snapshot`](crate::profile::Snapshot) that return
//! structured findings. They read nothing but the snapshot, so a saved profile is analysed
//! exactly as the live one was; outputs turn the findings into words.

mod leaks;

pub use leaks::{
    leaks, Leak, LeakSource, LEAK_MIN_CALLS, LEAK_MIN_HEAP_BYTES, LEAK_MIN_RSS_BYTES,
    LEAK_MIN_SHARE,
};
