//! spanprof's integration tests, in one test binary: one link of every dependency instead of one
//! per file (as cargo's `tests/testsuite` and rust-analyzer do). A module per subject; shared
//! helpers in `tests/support/`.
//!
//! Run one module with `cargo test --all-features --test it chrome::`, one test with
//! `cargo test --all-features --test it -- --exact chrome::ctrlc_child`.
//!
//! A test that needs a process of its own is a binary of its own in `tests/`, with its reason at
//! its top: it sets the global default subscriber (`callsite_interest`, and `leaked_guard`,
//! `otlp`, `windows` through `support::events::capture`), judges process-wide heap or RSS
//! figures (`counting_alloc`, `leak_beside_unrelated_frees`, `leak_returned_buffer`,
//! `resources`), counts the process's threads (`leaked_guard`), sets variables of the process's
//! environment (`otlp`), sends itself signals (`signals`), or runs alone in release in CI
//! (`fuzz_profiles`). Here, a test that needs another environment runs a test of this binary in
//! a child process (`support::run_test`); none changes this process's environment.

/// This binary's allocator, so that heap figures are measured (`golden`, `metrics`); no test here
/// judges the process-wide heap (those that do are binaries of their own).
#[global_allocator]
static ALLOC: spanprof::CountingAlloc = spanprof::CountingAlloc::system();

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "chrome")]
mod chrome;
#[cfg(feature = "cli")]
mod cli;
mod config_and_outputs;
mod config_lossy;
mod config_rules;
mod corners;
#[cfg(feature = "csv")]
mod csv_output;
#[cfg(all(target_os = "linux", feature = "cuda"))]
mod cuda_fake;
mod filter_directives;
mod golden;
mod html_report;
#[cfg(feature = "http")]
mod http_endpoint;
mod metrics;
#[cfg(all(target_os = "linux", feature = "nvml"))]
mod nvml_fake;
mod off_preset;
mod output_faults;
mod outputs;
mod overhead;
mod profile_input;
#[cfg(feature = "prometheus")]
mod prometheus;
mod quick_start_filter;
mod readme_quick_start;
mod report_corners;
mod run_end;
mod timing;
mod tree;
