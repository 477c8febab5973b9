//! Leak suspicion: span names whose calls keep retaining memory that the process keeps.
//!
//! A judgement derived from the model's figures (each name's heap and RSS figures, its place
//! in the call tree, the run's end-of-run memory), kept with the model as its other derived
//! values ([`figures`](super::figures)) are, so that every report shows it from one rule
//! without an output reaching into the analyses; [`crate::analysis::leaks`] is the same
//! function, among the analyses.

use std::collections::{BTreeSet, HashMap};

use super::{HeapUse, MemoryUse, Snapshot, SpanStats};

/// Fewest calls before a span name is judged.
pub const LEAK_MIN_CALLS: u64 = 16;
/// Share of calls that must have kept memory (heap, children excluded).
pub const LEAK_MIN_SHARE: f64 = 0.75;
/// Net heap (children excluded) a span name must have kept in all.
pub const LEAK_MIN_HEAP_BYTES: i64 = 64 * 1024;
/// RSS growth a span name must show in all, without the counting allocator (RSS moves in pages
/// and is sampled).
pub const LEAK_MIN_RSS_BYTES: i64 = 32 * 1024 * 1024;

/// What a leak suspicion was judged from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeakSource {
    /// Heap kept per entry, children excluded (the counting allocator).
    Heap,
    /// RSS growth per instance (without the counting allocator).
    Rss,
}

/// A span name whose calls keep retaining memory, with the evidence.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Leak {
    /// Span name.
    pub name: String,
    /// Span target.
    pub target: String,
    /// What the judgement rests on.
    pub source: LeakSource,
    /// Bytes kept in all (for [`LeakSource::Heap`], the span name's self retention).
    pub retained_bytes: i64,
    /// Calls (entries for [`LeakSource::Heap`], instances for [`LeakSource::Rss`]) judged.
    pub calls: u64,
    /// Bytes kept per call.
    pub per_call_bytes: f64,
    /// Share of calls that kept memory, 0..=1.
    pub share_of_calls: f64,
    /// How much the process's heap (or RSS) grew over the second half of the run.
    pub process_growth_bytes: i64,
    /// What other span names freed beyond what they allocated (their negative self retention)
    /// that may have been this span name's memory, by the call tree where the profile has
    /// one (see [`leaks`]): the suspicion rests on `retained_bytes - freed_elsewhere_bytes`.
    /// Always 0 for [`LeakSource::Rss`].
    pub freed_elsewhere_bytes: i64,
}

/// The span names of `snapshot` suspected of leaking, in the snapshot's order.
///
/// Each span name is judged on the profile's figures alone, by these rules.
///
/// **Heap** (with the counting allocator). A span's *self retention* is what its entries
/// allocated minus what they freed, child spans excluded ([`HeapUse::self_retained_bytes`]).
/// Memory that outlives the entry that allocated it shows there: a leak, but also a buffer a
/// span returns and its caller frees (positive in the span, negative in the caller), or items a
/// producer span hands to a consumer span that frees them later (positive in the producer,
/// negative in the consumer). The heap figures are per span name, so which span's memory a free
/// released is not recorded; the rule takes the view least likely to accuse wrongly that the
/// profile allows. A span name N is suspected only if *kept − freed elsewhere*, the part of
/// what it kept that no free elsewhere can account for, is at least [`LEAK_MIN_HEAP_BYTES`],
/// where *kept* is N's self retention and *freed elsewhere* what the other span names freed
/// beyond what they allocated (their negative self retention) that may have been N's memory:
///
/// - **with a call tree** ([`Snapshot::tree`]), per call path. A caller's frees release what
///   its callees returned first: the frees of a span name F count for the span names the tree
///   puts below F (on any path), whole; what F freed beyond all that those names kept (or all
///   of it, where F has an `[other]` node below it, whose names are unknown) may have been
///   anyone's, and counts for every span name. So a buffer a span returns is cleared by its
///   caller's frees, and unrelated frees (another name freeing what its own callee returned)
///   do not mask a leak elsewhere. A span name with no node in the tree (past its bounds) is
///   judged as without one;
/// - **without a call tree**, any free elsewhere may have released N's memory: the frees of
///   every other span name count.
///
/// And over at least [`LEAK_MIN_CALLS`] entries, at least [`LEAK_MIN_SHARE`] of them kept
/// memory; and the process's heap grew over the second half of the run (from the timeline's
/// middle sample to the snapshot) by at least a quarter of the unaccounted part (a steady leak
/// grows it by about half). The price: memory handed between span names the tree does not
/// nest (a producer and its consumer) is told from a leak only by its size, so a real leak no
/// larger than such frees is not flagged; a leak below a span name that frees as much is not
/// either; and memory freed outside any span (or on a thread without spans) clears nothing.
///
/// **RSS** (without the counting allocator). A span name is suspected when at least
/// `LEAK_MIN_CALLS / 2` instances were judged, half of them grew RSS, by
/// [`LEAK_MIN_RSS_BYTES`] in all, and the process's RSS grew over the second half of the run by a
/// quarter of that. RSS growth includes child spans and other threads: an outer span around a
/// leaking one shows the same growth.
///
/// The end point is the process's memory when the snapshot was taken
/// ([`ResourceInfo::heap_bytes_at_end`](crate::profile::ResourceInfo::heap_bytes_at_end)):
/// profiles written before schema v3 lack it, and nothing in them is judged.
///
/// Needs the resource figures of the `detailed` preset; returns nothing without them.
pub fn leaks(snapshot: &Snapshot) -> Vec<Leak> {
    let growth = Growth::of(snapshot);
    let frees = Frees::of(snapshot);
    snapshot
        .spans
        .iter()
        .enumerate()
        .filter_map(|(i, s)| judge(s, growth, frees.elsewhere(i)))
        .collect()
}

/// The frees of each span name beyond what it allocated, and which span names' memory they may
/// have released, from the call tree where there is one.
struct Frees {
    /// What each span name (in [`Snapshot::spans`] order) freed beyond what it allocated.
    freed: Vec<i128>,
    /// Of that, what its descendants' retention does not account for: it counts for every
    /// span name.
    unexplained: Vec<i128>,
    /// Per span name, the span names above it in the tree; `None` where the tree does not
    /// place it (no tree, or no node of its own).
    callers: Vec<Option<BTreeSet<usize>>>,
    /// Sums of `freed` and of `unexplained` over every span name: what every other name freed
    /// is a sum less one term, not a walk over the names for each name.
    all_freed: i128,
    all_unexplained: i128,
}

impl Frees {
    fn of(snapshot: &Snapshot) -> Self {
        let spans = &snapshot.spans;
        let retained = |s: &SpanStats| -> i128 {
            s.resources
                .as_ref()
                .and_then(|r| r.heap.as_ref())
                .map_or(0, |h| h.self_retained_bytes.into())
        };
        let freed: Vec<i128> = spans.iter().map(|s| -retained(s).min(0)).collect();
        let mut callers: Vec<Option<BTreeSet<usize>>> = vec![None; spans.len()];
        // Span names with an `[other]` node below them: spans of unknown names.
        let mut hidden = vec![false; spans.len()];
        if let Some(tree) = &snapshot.tree {
            let index: HashMap<(&str, &str), usize> = spans
                .iter()
                .enumerate()
                .map(|(i, s)| ((s.name.as_str(), s.target.as_str()), i))
                .collect();
            let parent = |i: usize| tree.nodes[i].parent.map(|p| p as usize).filter(|&p| p < i);
            let span_of: Vec<Option<usize>> = tree
                .nodes
                .iter()
                .map(|n| {
                    (!n.other)
                        .then(|| index.get(&(n.name.as_str(), n.target.as_str())).copied())
                        .flatten()
                })
                .collect();
            for (i, node) in tree.nodes.iter().enumerate() {
                let mut above = parent(i);
                if node.other {
                    while let Some(p) = above {
                        if let Some(f) = span_of[p] {
                            hidden[f] = true;
                        }
                        above = parent(p);
                    }
                    continue;
                }
                let Some(n) = span_of[i] else { continue };
                let mine = callers[n].get_or_insert_with(BTreeSet::new);
                while let Some(p) = above {
                    if let Some(f) = span_of[p].filter(|&f| f != n) {
                        mine.insert(f);
                    }
                    above = parent(p);
                }
            }
        }
        // What each span name's descendants kept, against what it freed.
        let mut below = vec![0i128; spans.len()];
        for (n, above) in callers.iter().enumerate() {
            for &f in above.iter().flatten() {
                below[f] += retained(&spans[n]).max(0);
            }
        }
        let unexplained = (0..spans.len())
            .map(|f| {
                if hidden[f] || callers[f].is_none() {
                    freed[f]
                } else {
                    (freed[f] - below[f]).max(0)
                }
            })
            .collect();
        let unexplained: Vec<i128> = unexplained;
        Frees {
            all_freed: freed.iter().sum(),
            all_unexplained: unexplained.iter().sum(),
            freed,
            unexplained,
            callers,
        }
    }

    /// What span names other than the `n`th freed that may have been its memory.
    ///
    /// Every other name's `freed` where the tree does not place `n`; else every other name's
    /// `unexplained`, and the whole of what the names above `n` freed. One pass over `n`'s
    /// callers, not over every name: linear in the names for all of them.
    fn elsewhere(&self, n: usize) -> i64 {
        let total: i128 = match &self.callers[n] {
            None => self.all_freed - self.freed[n],
            Some(above) => {
                self.all_unexplained - self.unexplained[n]
                    + above
                        .iter()
                        .filter(|&&f| f != n)
                        .map(|&f| self.freed[f] - self.unexplained[f])
                        .sum::<i128>()
            }
        };
        clamp_i64(total)
    }
}

/// How much the process's memory grew over the second half of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Growth {
    heap: Option<i64>,
    rss: Option<i64>,
}

impl Growth {
    fn of(snapshot: &Snapshot) -> Self {
        let Some(info) = &snapshot.resources else {
            return Growth::default();
        };
        let timeline = &info.timeline;
        // With fewer than four samples there is no second half to speak of: since the start.
        let mid = if timeline.len() >= 4 {
            timeline.get(timeline.len() / 2)
        } else {
            timeline.first()
        };
        // Profiles before schema v3 have no end readings: growth is unknown, nothing is judged.
        // (The last sample is no stand-in: what a run frees at its end would be missed.)
        Growth {
            heap: info
                .heap_bytes_at_end
                .zip(mid.and_then(|s| s.heap_bytes))
                .map(|(now, then)| now.saturating_sub(then)),
            rss: info
                .rss_bytes_at_end
                .zip(mid.and_then(|s| s.rss_bytes))
                .map(|(now, then)| clamp_i64(i128::from(now) - i128::from(then))),
        }
    }
}

/// The suspicion of one span name, if any; `freed_elsewhere`: what the other span names freed
/// beyond what they allocated.
fn judge(span: &SpanStats, growth: Growth, freed_elsewhere: i64) -> Option<Leak> {
    let r = span.resources.as_ref()?;
    if let Some(h) = &r.heap {
        return judge_heap(span, h, growth.heap, freed_elsewhere);
    }
    judge_rss(span, r.memory.as_ref()?, growth.rss)
}

fn judge_heap(
    span: &SpanStats,
    h: &HeapUse,
    grew: Option<i64>,
    freed_elsewhere: i64,
) -> Option<Leak> {
    let retained = h.self_retained_bytes;
    // What no free elsewhere can account for.
    let unaccounted = clamp_i64(i128::from(retained) - i128::from(freed_elsewhere));
    let share = h.retaining_entries as f64 / h.entries.max(1) as f64;
    if h.entries < LEAK_MIN_CALLS || share < LEAK_MIN_SHARE || unaccounted < LEAK_MIN_HEAP_BYTES {
        return None;
    }
    let grew = kept_growing(grew, unaccounted)?;
    Some(Leak {
        freed_elsewhere_bytes: freed_elsewhere,
        ..Leak::new(span, LeakSource::Heap, retained, h.entries, share, grew)
    })
}

fn judge_rss(span: &SpanStats, m: &MemoryUse, grew: Option<i64>) -> Option<Leak> {
    let retained = m.rss_delta_bytes;
    let share = m.growing_instances as f64 / m.instances.max(1) as f64;
    if m.instances < LEAK_MIN_CALLS / 2 || share < 0.5 || retained < LEAK_MIN_RSS_BYTES {
        return None;
    }
    let grew = kept_growing(grew, retained)?;
    Some(Leak::new(
        span,
        LeakSource::Rss,
        retained,
        m.instances,
        share,
        grew,
    ))
}

/// The process's growth, if it kept growing while `kept` bytes were suspected kept: memory a
/// steady leak keeps grows the process in the second half of the run by about half of what
/// the span kept; a quarter is asked for.
fn kept_growing(grew: Option<i64>, kept: i64) -> Option<i64> {
    grew.filter(|&g| 4 * i128::from(g) >= i128::from(kept))
}

impl Leak {
    fn new(
        span: &SpanStats,
        source: LeakSource,
        retained: i64,
        calls: u64,
        share: f64,
        grew: i64,
    ) -> Self {
        Leak {
            name: span.name.clone(),
            target: span.target.clone(),
            source,
            retained_bytes: retained,
            calls,
            per_call_bytes: retained as f64 / calls as f64,
            share_of_calls: share,
            process_growth_bytes: grew,
            freed_elsewhere_bytes: 0,
        }
    }
}

/// An `i128` as an `i64`, saturated at its bounds.
fn clamp_i64(v: i128) -> i64 {
    v.clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Sample;

    /// A snapshot with one span name whose `calls` entries each kept `self_net` bytes, the
    /// process's heap going from `mid` (middle sample) to `end`.
    fn profile(calls: Vec<i64>, mid: i64, end: i64) -> Snapshot {
        let mut snapshot = Snapshot::from_json(
            include_str!("../../tests/data/profile-v2-detailed.json"),
            "test data",
        )
        .unwrap();
        snapshot.spans.truncate(1);
        let span = &mut snapshot.spans[0];
        let heap = span
            .resources
            .as_mut()
            .and_then(|r| r.heap.as_mut())
            .unwrap();
        heap.entries = calls.len() as u64;
        heap.self_retained_bytes = calls.iter().sum();
        heap.retaining_entries = calls.iter().filter(|&&c| c > 0).count() as u64;
        let info = snapshot.resources.as_mut().unwrap();
        info.timeline = (0..8)
            .map(|i| Sample {
                t_ns: i * 100,
                seq: i,
                heap_bytes: Some(if i < 4 { 0 } else { mid }),
                ..Sample::default()
            })
            .collect();
        info.heap_bytes_at_end = Some(end);
        snapshot
    }

    /// A span name for [`profile_of`]: its name, entries, and bytes each entry kept (children
    /// excluded; negative: freed more than it allocated).
    struct Named(&'static str, u64, i64);

    /// A snapshot with one span name per `spans`, the process's heap going from `mid` (middle
    /// sample) to `end`.
    fn profile_of(spans: &[Named], mid: i64, end: i64) -> Snapshot {
        let mut snapshot = profile(vec![0], mid, end);
        let like = snapshot.spans[0].clone();
        snapshot.spans = spans
            .iter()
            .map(|&Named(name, entries, each)| {
                let mut span = like.clone();
                span.name = name.to_string();
                let heap = span
                    .resources
                    .as_mut()
                    .and_then(|r| r.heap.as_mut())
                    .unwrap();
                heap.entries = entries;
                heap.self_retained_bytes = each * entries as i64;
                heap.retaining_entries = if each > 0 { entries } else { 0 };
                span
            })
            .collect();
        snapshot
    }

    fn names(found: &[Leak]) -> Vec<&str> {
        found.iter().map(|l| l.name.as_str()).collect()
    }

    /// `snapshot` with a call tree of `paths` (each a node: its name and its parent's index in
    /// `paths`), nodes made from the golden profile's.
    fn with_tree(mut snapshot: Snapshot, paths: &[(&str, Option<u32>)]) -> Snapshot {
        let golden = Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "test data",
        )
        .unwrap();
        let like = golden.tree.as_ref().unwrap().nodes[1].clone();
        let target = snapshot.spans[0].target.clone();
        let nodes = paths
            .iter()
            .map(|&(name, parent)| {
                let mut node = like.clone();
                node.name = name.to_string();
                node.target = target.clone();
                node.parent = parent;
                node.other = name == crate::profile::TreeNode::OTHER;
                node
            })
            .collect();
        snapshot.tree = Some(crate::profile::CallTree::new(nodes, 64, 16));
        snapshot
    }

    /// The audit's run: `stash` keeps 64 KiB on each of its 20 calls and the process grows,
    /// while `serve` frees the 128 KiB page `fetch`, its callee, returns, 40 times over (5 MiB
    /// freed, more than the leak). Frees the tree puts below `serve` release `fetch`'s memory,
    /// not `stash`'s: the leak is flagged, the returned page is not.
    #[test]
    fn a_leak_beside_larger_frees_of_an_unrelated_returned_buffer_is_flagged() {
        let spans = [
            Named("serve", 40, -128 * 1024),
            Named("fetch", 40, 128 * 1024),
            Named("stash", 20, 64 * 1024),
        ];
        let s = with_tree(
            profile_of(&spans, 640 * 1024, 1280 * 1024),
            &[("serve", None), ("fetch", Some(0)), ("stash", None)],
        );
        let found = leaks(&s);
        assert_eq!(names(&found), ["stash"], "{found:?}");
        assert_eq!(found[0].retained_bytes, 20 * 64 * 1024);
        assert_eq!(found[0].freed_elsewhere_bytes, 0, "{found:?}");
    }

    /// With the tree: the returned buffer is cleared by its caller alone, and the caller's
    /// frees are no evidence for the real leak beside it.
    #[test]
    fn with_a_tree_a_callers_frees_clear_its_callees_only() {
        let spans = [
            Named("render", 100, 2 * 1024),
            Named("handle", 100, -2 * 1024),
            Named("cache_insert", 100, 8 * 1024),
        ];
        let tree = [
            ("handle", None),
            ("render", Some(0)),
            ("cache_insert", None),
        ];
        let found = leaks(&with_tree(
            profile_of(&spans, 400 * 1024, 800 * 1024),
            &tree,
        ));
        assert_eq!(names(&found), ["cache_insert"], "{found:?}");
        assert_eq!(found[0].freed_elsewhere_bytes, 0);
        // The returned buffer alone, the process flat: nothing.
        let alone = with_tree(profile_of(&spans[..2], 0, 0), &tree[..2]);
        assert_eq!(leaks(&alone), []);
        // A caller two levels up clears it as well: render under handle under serve, which
        // frees it.
        let spans = [
            Named("serve", 100, -2 * 1024),
            Named("handle", 100, 0),
            Named("render", 100, 2 * 1024),
            Named("cache_insert", 100, 8 * 1024),
        ];
        let tree = [
            ("serve", None),
            ("handle", Some(0)),
            ("render", Some(1)),
            ("cache_insert", None),
        ];
        let found = leaks(&with_tree(
            profile_of(&spans, 400 * 1024, 800 * 1024),
            &tree,
        ));
        assert_eq!(names(&found), ["cache_insert"], "{found:?}");
    }

    /// With the tree, frees its nesting does not explain (a consumer freeing what a sibling
    /// produced; a caller freeing more than its callees kept; spans past the tree's bounds
    /// below the caller) may have been anyone's, as without a tree.
    #[test]
    fn with_a_tree_frees_it_does_not_explain_count_for_every_name() {
        let spans = [
            Named("produce", 100, 8 * 1024),
            Named("consume", 100, -8 * 1024),
            Named("leak_small", 50, 8 * 1024),
        ];
        let siblings = [("produce", None), ("consume", None), ("leak_small", None)];
        let s = with_tree(profile_of(&spans, 200 * 1024, 400 * 1024), &siblings);
        assert_eq!(leaks(&s), []);
        // serve frees 5 MiB, fetch below it kept 2.5 MiB of it: the other 2.5 MiB may have
        // been stash's 1.25 MiB.
        let spans = [
            Named("serve", 40, -128 * 1024),
            Named("fetch", 40, 64 * 1024),
            Named("stash", 20, 64 * 1024),
        ];
        let nested = [("serve", None), ("fetch", Some(0)), ("stash", None)];
        let s = with_tree(profile_of(&spans, 640 * 1024, 1280 * 1024), &nested);
        let found = leaks(&s);
        assert_eq!(names(&found), [] as [&str; 0], "{found:?}");
        // The audit's run, but with spans past the tree's bounds below serve: what serve freed
        // may have been theirs, of names unknown, and stash's.
        let spans = [
            Named("serve", 40, -128 * 1024),
            Named("fetch", 40, 128 * 1024),
            Named("stash", 20, 64 * 1024),
        ];
        let bounded = [
            ("serve", None),
            ("fetch", Some(0)),
            (crate::profile::TreeNode::OTHER, Some(0)),
            ("stash", None),
        ];
        let s = with_tree(profile_of(&spans, 640 * 1024, 1280 * 1024), &bounded);
        assert_eq!(leaks(&s), []);
        // And a span name the tree does not place is judged as without a tree.
        let unplaced = [("serve", None), ("fetch", Some(0))];
        let s = with_tree(profile_of(&spans, 640 * 1024, 1280 * 1024), &unplaced);
        assert_eq!(leaks(&s), []);
    }

    #[test]
    fn a_returned_buffer_its_caller_frees_is_not_a_leak_beside_a_real_one() {
        // `render` returns a 2 KiB buffer that `handle` frees at once; `cache_insert` really
        // keeps 8 KiB per call, so the process grows (by half of it in the second half).
        let spans = [
            Named("render", 100, 2 * 1024),
            Named("handle", 100, -2 * 1024),
            Named("cache_insert", 100, 8 * 1024),
        ];
        let found = leaks(&profile_of(&spans, 400 * 1024, 800 * 1024));
        assert_eq!(names(&found), ["cache_insert"], "{found:?}");
        let leak = &found[0];
        assert_eq!(leak.retained_bytes, 800 * 1024);
        assert_eq!(leak.freed_elsewhere_bytes, 200 * 1024);
        // The real leak alone is flagged as well.
        let found = leaks(&profile_of(&spans[2..], 400 * 1024, 800 * 1024));
        assert_eq!(names(&found), ["cache_insert"], "{found:?}");
        assert_eq!(found[0].freed_elsewhere_bytes, 0);
        // And the returned buffer alone, with the process flat, is nothing.
        assert_eq!(leaks(&profile_of(&spans[..2], 0, 0)), []);
    }

    #[test]
    fn retention_that_frees_elsewhere_could_explain_is_not_a_leak() {
        // A producer hands 8 KiB per call to a consumer that frees it later; another span
        // leaks meanwhile. Neither the producer nor a leak no larger than what was freed
        // elsewhere can be told from memory handed on: neither is flagged.
        let spans = [
            Named("produce", 100, 8 * 1024),
            Named("consume", 100, -8 * 1024),
            Named("leak_small", 50, 8 * 1024),
        ];
        assert_eq!(leaks(&profile_of(&spans, 200 * 1024, 400 * 1024)), []);
        // What the frees elsewhere cannot cover is judged: 1200 KiB kept, 800 KiB freed.
        let spans = [
            Named("produce", 100, 12 * 1024),
            Named("consume", 100, -8 * 1024),
        ];
        let found = leaks(&profile_of(&spans, 200 * 1024, 400 * 1024));
        assert_eq!(names(&found), ["produce"], "{found:?}");
        assert_eq!(found[0].freed_elsewhere_bytes, 800 * 1024);
    }

    #[test]
    fn steady_retention_the_process_keeps_is_a_leak() {
        let s = profile(vec![8 * 1024; 40], 0, 40 * 8 * 1024);
        let found = leaks(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        let leak = &found[0];
        assert_eq!(leak.name, s.spans[0].name);
        assert_eq!(leak.source, LeakSource::Heap);
        assert_eq!((leak.retained_bytes, leak.calls), (40 * 8 * 1024, 40));
        assert_eq!(leak.per_call_bytes, 8.0 * 1024.0);
        assert_eq!(leak.share_of_calls, 1.0);
        assert_eq!(leak.process_growth_bytes, 40 * 8 * 1024);
    }

    #[test]
    fn retention_the_caller_frees_is_not_a_leak() {
        // The same retention, but the process did not grow in the second half.
        assert_eq!(leaks(&profile(vec![8 * 1024; 40], 5 << 20, 5 << 20)), []);
    }

    #[test]
    fn balanced_or_occasional_retention_is_not_a_leak() {
        assert_eq!(leaks(&profile(vec![0; 200], 0, 1 << 30)), []);
        // A cache warming up: one call keeps 1 MiB, 99 keep nothing.
        let mut calls = vec![0; 100];
        calls[0] = 1 << 20;
        assert_eq!(leaks(&profile(calls, 0, 1 << 20)), []);
        // Too few calls to judge.
        assert_eq!(leaks(&profile(vec![1 << 20; 15], 0, 1 << 30)), []);
    }

    #[test]
    fn profiles_without_end_readings_are_not_judged() {
        let mut s = profile(vec![8 * 1024; 40], 0, 1 << 20);
        assert_eq!(leaks(&s).len(), 1);
        s.resources.as_mut().unwrap().heap_bytes_at_end = None;
        assert_eq!(leaks(&s), []);
    }

    #[test]
    fn extreme_figures_do_not_overflow() {
        // Crafted figures: differences and multiples past i64 saturate instead of wrapping
        // (or panicking in a debug build).
        let s = profile(vec![i64::MAX / 40; 40], i64::MIN, i64::MAX);
        let found = leaks(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].process_growth_bytes, i64::MAX);
        let s = profile(vec![8 * 1024; 40], i64::MAX, i64::MIN);
        assert_eq!(leaks(&s), []);
    }

    #[test]
    fn a_basic_profile_has_no_findings() {
        let s = Snapshot::from_json(
            include_str!("../../tests/data/profile-v1-basic.json"),
            "test data",
        )
        .unwrap();
        assert_eq!(leaks(&s), []);
    }
}
