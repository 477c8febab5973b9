//! A mutation fuzzer for `Snapshot::from_json` that runs on stable as an ordinary test.
//!
//! It mutates the real profiles in `tests/data` (byte flips, truncations, duplicated and removed
//! chunks, random JSON numbers, crafted base64 histogram strings with random and oversized V2
//! headers) and checks, for every input, that the reader
//! - returns (`Ok` or `Err(Error::InvalidProfile)`), never panics;
//! - takes at most [`ns_per_byte`] per input byte plus [`TIME_SLACK`];
//! - allocates at most [`BYTES_PER_INPUT_BYTE`] × the input size + [`BYTES_SLACK`] bytes in all
//!   (counted by `spanprof::CountingAlloc`, this binary's global allocator).
//!
//! The PRNG is a fixed-seed xorshift, so a run is reproducible. `SPANPROF_FUZZ_ITERS` sets the
//! number of inputs (default [`DEFAULT_ITERS`]); `SPANPROF_FUZZ_SEED` another seed. The number
//! of executions is printed on stderr (`cargo test --test fuzz_profiles -- --nocapture`).
//!
//! A test binary of its own (not a module of `tests/it/`): CI runs it alone, in release, with
//! 50 000 inputs (`cargo test --release --all-features --test fuzz_profiles`).

mod support;

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use base64::Engine;
use spanprof::alloc::HeapCounters;
use spanprof::{CountingAlloc, Error, Snapshot};
use support::v2::{number, zlib};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::system();

/// Inputs per run unless `SPANPROF_FUZZ_ITERS` says otherwise: some 10 s in a debug build on
/// 2 cores, 2 s in a release one.
const DEFAULT_ITERS: u64 = 10_000;

/// Bytes the reader may allocate per byte of input (all allocations, freed or not). Real
/// profiles need about 3: histograms are kept as their compressed encoding (checked, not
/// decoded into buckets), and a histogram may inflate at most 32 times its size. The worst
/// inputs are arrays of the smallest JSON elements that become the largest structs (`{}`, 3
/// bytes, becomes a `GpuSample`, its `Vec` growing by doubling: about 60 bytes per byte);
/// `the_memory_multiple_holds_for_the_worst_inputs` measures them.
const BYTES_PER_INPUT_BYTE: u64 = 100;
/// Bytes any input may allocate besides: the error message, the header parse.
const BYTES_SLACK: u64 = 256 * 1024;

/// Time allowed per input byte: 100 ms per MB in a release build, 200 times that in a debug
/// one (dependencies unoptimised: inflating is some 100 times slower).
fn ns_per_byte() -> u64 {
    if cfg!(debug_assertions) {
        20_000
    } else {
        100
    }
}
/// Time any input may take besides (scheduling, a cold cache).
const TIME_SLACK: Duration = Duration::from_millis(50);

const BASES: [(&str, &str); 3] = [
    (
        "profile-v1-basic.json",
        include_str!("data/profile-v1-basic.json"),
    ),
    (
        "profile-v2-detailed.json",
        include_str!("data/profile-v2-detailed.json"),
    ),
    (
        "golden-profile.json",
        include_str!("data/golden-profile.json"),
    ),
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    /// `wild` one time in four, else `usual`.
    fn pick(&mut self, usual: u64, wild: impl FnOnce(&mut Rng) -> u64) -> u64 {
        if self.chance(4) {
            wild(self)
        } else {
            usual
        }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next() % one_in == 0
    }
}

/// A crafted histogram string: a V2 header with spanprof's fields or random ones (a payload
/// length up to 4 GiB among them), a payload of random numbers or long runs, compressed with
/// a real or random length, sometimes mangled after compression.
fn crafted_histogram(rng: &mut Rng) -> String {
    let mut payload = Vec::new();
    let numbers = rng.below(40);
    for _ in 0..numbers {
        let n = match rng.below(6) {
            0 => rng.next() as i64,
            1 => -(rng.below(5000) as i64),
            2 => [i64::MIN, i64::MAX, -1, 0, 1][rng.below(5)],
            _ => rng.below(300) as i64,
        };
        payload.extend(number(n));
    }
    if rng.chance(8) {
        // Many buckets, or a long tail of bytes that compress to little.
        let byte = [0u8, 2, 0x80, 0xff][rng.below(4)];
        payload.extend(std::iter::repeat(byte).take(rng.below(60_000)));
    }
    let wild_len = [u32::MAX, 0, 1 << 31, rng.next() as u32][rng.below(4)];
    let payload_len = rng.pick(payload.len() as u64, |_| u64::from(wild_len)) as u32;
    let mut v2 = Vec::new();
    v2.extend(
        rng.pick(0x1c84_9313, |rng| rng.next() & 0xffff_ffff)
            .to_be_bytes()[4..]
            .iter(),
    );
    v2.extend(payload_len.to_be_bytes());
    v2.extend((rng.pick(0, |rng| rng.next() % 3) as u32).to_be_bytes());
    v2.extend((rng.pick(2, |rng| rng.next() % 6) as u32).to_be_bytes());
    v2.extend(rng.pick(1, |rng| rng.next() >> rng.below(64)).to_be_bytes());
    v2.extend(
        rng.pick(3_600_000_000_000, |rng| rng.next() >> rng.below(64))
            .to_be_bytes(),
    );
    v2.extend(rng.pick(1.0f64.to_bits(), |rng| rng.next()).to_be_bytes());
    v2.extend(&payload);
    let mut deflated = zlib(&v2);
    if rng.chance(5) && !deflated.is_empty() {
        let at = rng.below(deflated.len());
        deflated[at] ^= 1 << rng.below(8);
    }
    if rng.chance(8) {
        deflated.truncate(rng.below(deflated.len() + 1));
    }
    let mut bytes = Vec::new();
    bytes.extend(
        rng.pick(0x1c84_9314, |rng| rng.next() & 0xffff_ffff)
            .to_be_bytes()[4..]
            .iter(),
    );
    let len = rng.pick(deflated.len() as u64, |rng| rng.next() & 0xffff_ffff) as u32;
    bytes.extend(len.to_be_bytes());
    bytes.extend(&deflated);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Replaces the value of the `n`th `"histogram": "..."` of `json` with `with`.
fn replace_histogram(json: &str, rng: &mut Rng, with: &str) -> String {
    let key = "\"histogram\": \"";
    let starts: Vec<usize> = json
        .match_indices(key)
        .map(|(i, _)| i + key.len())
        .collect();
    if starts.is_empty() {
        return json.to_string();
    }
    let start = starts[rng.below(starts.len())];
    let end = start + json[start..].find('"').unwrap_or(0);
    format!("{}{}{}", &json[..start], with, &json[end..])
}

/// Replaces a random run of digits (a JSON number or part of one) with a random number.
fn replace_number(json: &str, rng: &mut Rng) -> String {
    let bytes = json.as_bytes();
    for _ in 0..20 {
        let at = rng.below(bytes.len());
        if !bytes[at].is_ascii_digit() {
            continue;
        }
        let mut start = at;
        while start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b'-') {
            start -= 1;
        }
        let mut end = at;
        while end < bytes.len() && bytes[end].is_ascii_digit() {
            end += 1;
        }
        let value = match rng.below(8) {
            0 => "-1".to_string(),
            1 => u64::MAX.to_string(),
            2 => "18446744073709551616".to_string(),
            3 => i64::MIN.to_string(),
            4 => format!("{}.5e{}", rng.below(100), rng.below(400)),
            5 => "0".to_string(),
            6 => (rng.next() >> rng.below(64)).to_string(),
            _ => "1e999".to_string(),
        };
        return format!("{}{}{}", &json[..start], value, &json[end..]);
    }
    json.to_string()
}

/// One mutated input.
fn mutate(rng: &mut Rng) -> String {
    let base = BASES[rng.below(BASES.len())].1;
    let mut bytes: Vec<u8> = base.as_bytes().to_vec();
    let mut text: Option<String> = None;
    for _ in 0..1 + rng.below(3) {
        if let Some(t) = text.take() {
            bytes = t.into_bytes();
        }
        let len = bytes.len();
        match rng.below(9) {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    if len > 0 {
                        let at = rng.below(len);
                        bytes[at] = if rng.chance(2) {
                            bytes[at] ^ (1 << rng.below(8))
                        } else {
                            b"{}[]\",:0123456789-.eE \\nulltrue"[rng.below(30)]
                        };
                    }
                }
            }
            1 => bytes.truncate(rng.below(len + 1)),
            2 => {
                // Duplicate a chunk, in place or elsewhere, some times over.
                let start = rng.below(len);
                let end = (start + rng.below(2000)).min(len);
                let chunk = bytes[start..end].to_vec();
                let at = rng.below(len + 1);
                for _ in 0..1 + rng.below(4) {
                    bytes.splice(at..at, chunk.iter().copied());
                }
            }
            3 => {
                let start = rng.below(len);
                let end = (start + rng.below(2000)).min(len);
                bytes.drain(start..end);
            }
            4 | 5 => {
                let json = String::from_utf8_lossy(&bytes).into_owned();
                let h = crafted_histogram(rng);
                text = Some(replace_histogram(&json, rng, &h));
            }
            6 => {
                let json = String::from_utf8_lossy(&bytes).into_owned();
                // A real histogram of another statistic, or a mangled one.
                let mut h = BASES[0].1[BASES[0].1.find("HISTF").unwrap()..]
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string();
                if rng.chance(2) {
                    h.truncate(rng.below(h.len()));
                }
                text = Some(replace_histogram(&json, rng, &h));
            }
            _ => {
                let json = String::from_utf8_lossy(&bytes).into_owned();
                text = Some(replace_number(&json, rng));
            }
        }
    }
    text.unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned())
}

fn heap() -> HeapCounters {
    HeapCounters::thread().expect("CountingAlloc is this binary's global allocator")
}

/// Reads `json` and checks the three properties; returns whether it read.
fn check(json: &str, what: &str) -> bool {
    check_counting(json, what).0
}

/// [`check`], also returning the bytes allocated.
fn check_counting(json: &str, what: &str) -> (bool, u64) {
    let t0 = Instant::now();
    let h0 = heap();
    let result = catch_unwind(AssertUnwindSafe(|| Snapshot::from_json(json, "fuzz")));
    let allocated = heap().since(h0).allocated;
    let took = t0.elapsed();
    let ok = match result {
        Err(_) => panic!(
            "{what}: from_json panicked on {} bytes:\n{json}",
            json.len()
        ),
        Ok(Ok(_)) => true,
        Ok(Err(Error::InvalidProfile { .. })) => false,
        Ok(Err(other)) => panic!("{what}: not InvalidProfile: {other:?}"),
    };
    let n = json.len() as u64;
    let bound = BYTES_PER_INPUT_BYTE * n + BYTES_SLACK;
    assert!(
        allocated <= bound,
        "{what}: {allocated} bytes allocated for {n} bytes of input (bound {bound})"
    );
    let limit = Duration::from_nanos(ns_per_byte() * n) + TIME_SLACK;
    assert!(
        took <= limit,
        "{what}: {took:?} for {n} bytes of input (bound {limit:?})"
    );
    (ok, allocated)
}

fn report_ratio(what: &str, json: &str) {
    let t0 = Instant::now();
    let (ok, allocated) = check_counting(json, what);
    let took = t0.elapsed();
    assert!(ok, "{what} reads");
    eprintln!(
        "{what}: {allocated} bytes allocated for {} bytes of input ({:.1} per byte), {:.0} ms \
         per MB",
        json.len(),
        allocated as f64 / json.len() as f64,
        took.as_secs_f64() * 1e3 / (json.len() as f64 / 1e6)
    );
}

#[test]
fn mutated_profiles_are_read_or_rejected_within_bounds() {
    let iters: u64 = std::env::var("SPANPROF_FUZZ_ITERS")
        .ok()
        .map(|v| v.parse().expect("SPANPROF_FUZZ_ITERS is a number"))
        .unwrap_or(DEFAULT_ITERS);
    let seed: u64 = std::env::var("SPANPROF_FUZZ_SEED")
        .ok()
        .map(|v| v.parse().expect("SPANPROF_FUZZ_SEED is a number"))
        .unwrap_or(0x5eed_2026_0000_0001);
    // Warm up: the per-thread inflater and the first-use allocations of the test harness.
    for (name, json) in BASES {
        assert!(check(json, name), "{name} reads");
    }
    let mut rng = Rng(seed | 1);
    let (mut read, mut rejected) = (0u64, 0u64);
    let mut worst_ratio = 0f64;
    let started = Instant::now();
    for i in 0..iters {
        let input = mutate(&mut rng);
        let h0 = heap();
        if check(&input, &format!("input {i} (seed {seed})")) {
            read += 1;
        } else {
            rejected += 1;
        }
        let allocated = heap().since(h0).allocated;
        worst_ratio = worst_ratio.max(allocated as f64 / input.len().max(1) as f64);
    }
    eprintln!(
        "fuzz_profiles: {} executions ({read} read, {rejected} rejected) in {:.1?}, seed {seed}, \
         at most {worst_ratio:.1} bytes allocated per input byte",
        iters,
        started.elapsed()
    );
    assert!(
        rejected > 0 && (iters < 100 || read > 0),
        "the mutations reach both outcomes"
    );
}

/// The inputs that allocate most per byte stay within [`BYTES_PER_INPUT_BYTE`].
#[test]
fn the_memory_multiple_holds_for_the_worst_inputs() {
    let base: serde_json::Value = serde_json::from_str(BASES[1].1).unwrap();
    // GPU samples of no field: 3 bytes of JSON each.
    let mut v = base.clone();
    let gpus = vec![serde_json::json!({}); 50_000];
    v["resources"]["timeline"][0]["gpus"] = gpus.into();
    report_ratio("empty GPU samples", &v.to_string());

    // Every span's histograms hold all 4608 buckets (one sample each), compressed to ~60
    // bytes of base64 each; the counts agree. They inflate some 80 times: refused.
    let dense = dense_profile(&number(1).repeat(4608), 4608);
    assert!(
        !check(&dense, "dense histograms"),
        "dense histograms are refused"
    );
    let err = Snapshot::from_json(&dense, "dense.json")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a profile's histogram may inflate to"),
        "{err}"
    );
    // The longest payload: 4608 empty counters written as 9-byte numbers: refused too.
    let zero9 = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
    let mut longest = zero9.repeat(4607);
    longest.extend(number(1));
    assert!(!check(&dense_profile(&longest, 1), "longest payloads"));
    // Dense histograms that inflate within the bound: 1 200 buckets of distinct counts.
    let mut varied = Vec::new();
    for i in 0..1200u64 {
        varied.extend(number((1 + i * 7919 % 1000) as i64));
    }
    let total: u64 = (0..1200u64).map(|i| 1 + i * 7919 % 1000).sum();
    report_ratio("varied dense histograms", &dense_profile(&varied, total));
    report_ratio("profile-v2-detailed.json", BASES[1].1);
}

/// profile-v1-basic.json, compact, with `payload` as every histogram holding `count` samples.
fn dense_profile(payload: &[u8], count: u64) -> String {
    let mut v2 = Vec::new();
    v2.extend(0x1c84_9313u32.to_be_bytes());
    v2.extend((payload.len() as u32).to_be_bytes());
    v2.extend(0u32.to_be_bytes());
    v2.extend(2u32.to_be_bytes());
    v2.extend(1u64.to_be_bytes());
    v2.extend(3_600_000_000_000u64.to_be_bytes());
    v2.extend(1.0f64.to_bits().to_be_bytes());
    v2.extend(payload);
    let deflated = {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&v2).unwrap();
        z.finish().unwrap()
    };
    let mut bytes = Vec::new();
    bytes.extend(0x1c84_9314u32.to_be_bytes());
    bytes.extend((deflated.len() as u32).to_be_bytes());
    bytes.extend(&deflated);
    let dense = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut v: serde_json::Value = serde_json::from_str(BASES[0].1).unwrap();
    for span in v["spans"].as_array_mut().unwrap() {
        for stat in ["entry_busy", "entry_self", "busy", "self", "wall"] {
            let s = &mut span[stat];
            s["histogram"] = dense.clone().into();
            s["count"] = count.into();
            // The mean a reader checks against the total and the count.
            s["mean_ns"] = (s["total_ns"].as_u64().unwrap() as f64 / count as f64).into();
            s["min_ns"] = 1.into();
            s["max_ns"] = 3_600_000_000_000u64.into();
            for p in ["p50_ns", "p90_ns", "p99_ns", "p999_ns"] {
                s[p] = 1000.into();
            }
        }
    }
    // Compact, so the histograms are most of the input.
    serde_json::to_string(&v).unwrap()
}
