//! The call tree: paths across threads and async tasks, bounds, the exact agreement of the
//! tree with the per-name statistics, and its outputs checked by independent readers (inferno's
//! flamegraph renderer fed the folded stacks, headless Chromium for the SVG, `go tool pprof`
//! for pprof).

use crate::support;

use spanprof::builder::MAX_TREE_DEPTH;
use spanprof::profile::{CallTree, TreeNode};
use spanprof::{ProfileLayer, Snapshot};
use tracing::info_span;

/// Every entry is in exactly one node, every closed span counted in one: per name, the nodes'
/// calls and self totals are the name's entries', their instances the name's.
fn assert_tree_matches_names(snap: &Snapshot) {
    let tree = snap.tree.as_ref().expect("tree recorded");
    for span in &snap.spans {
        let nodes = tree
            .nodes
            .iter()
            .filter(|n| n.name == span.name && n.target == span.target);
        let (calls, self_ns, instances) = nodes.fold((0, 0, 0), |(c, s, i), n| {
            (c + n.calls, s + n.self_ns(), i + n.instances)
        });
        assert_eq!(calls, span.calls, "calls of {}", span.name);
        assert_eq!(self_ns, span.entry_self.total_ns, "self of {}", span.name);
        assert_eq!(instances, span.instances, "instances of {}", span.name);
    }
    let names_self: u64 = snap.spans.iter().map(|s| s.entry_self.total_ns).sum();
    assert_eq!(tree.self_ns(), names_self);
}

fn node<'a>(tree: &'a CallTree, path: &str) -> &'a TreeNode {
    let i = (0..tree.nodes.len())
        .find(|&i| tree.path(i).join(";") == path)
        .unwrap_or_else(|| {
            let all: Vec<_> = (0..tree.nodes.len())
                .map(|i| tree.path(i).join(";"))
                .collect();
            panic!("no node {path} in {all:?}")
        });
    &tree.nodes[i]
}

fn nested_work() {
    info_span!("outer").in_scope(|| {
        for _ in 0..10 {
            info_span!("mid").in_scope(|| {
                info_span!("leaf").in_scope(|| std::hint::black_box(0));
            });
            info_span!("leaf").in_scope(|| std::hint::black_box(0));
        }
    });
}

#[test]
fn threads_paths_and_totals_agree_with_the_per_name_statistics() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    std::thread::scope(|s| {
        for _ in 0..4 {
            let dispatch = dispatch.clone();
            s.spawn(move || tracing::dispatcher::with_default(&dispatch, nested_work));
        }
    });
    let snap = guard.snapshot();
    assert_tree_matches_names(&snap);
    let tree = snap.tree.as_ref().unwrap();
    assert_eq!(node(tree, "outer").instances, 4);
    assert_eq!(node(tree, "outer;mid").calls, 40);
    assert_eq!(node(tree, "outer;mid;leaf").instances, 40);
    assert_eq!(node(tree, "outer;leaf").instances, 40);
    assert_eq!(tree.nodes.len(), 4);
}

#[test]
fn async_spans_keep_their_path_on_every_thread_that_polls_them() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    let _d = tracing::dispatcher::set_default(&dispatch);
    runtime.block_on(async {
        use tracing::instrument::WithSubscriber;
        use tracing::Instrument;
        let server = info_span!("server");
        let mut tasks = Vec::new();
        for _ in 0..16 {
            // Created inside `server` (contextual parent), polled by any worker.
            let request = server.in_scope(|| info_span!("request"));
            let dispatch = dispatch.clone();
            tasks.push(tokio::spawn(
                async move {
                    for _ in 0..3 {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        info_span!("db").in_scope(|| std::hint::black_box(1));
                    }
                }
                .instrument(request)
                .with_subscriber(dispatch),
            ));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // The path follows the entry: a span with an explicit parent entered inside another
        // span on this thread is under that span (its time is inside that span's entry); one
        // never entered stays where it opened, under its explicit parent.
        let other = info_span!("other_root");
        server.in_scope(|| info_span!(parent: &other, "adopted").in_scope(|| {}));
        drop(info_span!(parent: &other, "never_entered"));
    });
    drop(runtime);
    let snap = guard.snapshot();
    assert_tree_matches_names(&snap);
    let tree = snap.tree.as_ref().unwrap();
    let request = node(tree, "server;request");
    assert_eq!(request.instances, 16);
    assert!(
        request.calls >= 16 * 4,
        "entered at every poll: {}",
        request.calls
    );
    assert_eq!(node(tree, "server;request;db").instances, 48);
    assert_eq!(node(tree, "server;adopted").calls, 1);
    assert_eq!(node(tree, "server;adopted").instances, 1);
    assert_eq!(node(tree, "other_root;never_entered").instances, 1);
    assert!(!(0..tree.nodes.len()).any(|i| tree.path(i).join(";") == "other_root;adopted"));
}

/// Nests one span per name given, the innermost doing `$leaf`.
macro_rules! nest {
    ($leaf:expr;) => { $leaf };
    ($leaf:expr; $first:ident $($rest:ident)*) => {
        info_span!(stringify!($first)).in_scope(|| nest!($leaf; $($rest)*))
    };
}

#[test]
fn past_the_depth_bound_spans_are_counted_in_an_other_node_never_lost() {
    let (dispatch, guard, clock) = support::mock();
    let tick = || clock.advance(std::time::Duration::from_micros(1));
    tracing::dispatcher::with_default(&dispatch, || {
        // 40 levels: 32 get nodes, the 8 below are counted in the 32nd's other node.
        nest!(tick(); d01 d02 d03 d04 d05 d06 d07 d08 d09 d10 d11 d12 d13 d14 d15 d16 d17 d18
            d19 d20 d21 d22 d23 d24 d25 d26 d27 d28 d29 d30 d31 d32 d33 d34 d35 d36 d37 d38 d39
            d40);
    });
    let snap = guard.snapshot();
    let tree = snap.tree.as_ref().unwrap();
    assert_eq!(MAX_TREE_DEPTH, 32);
    assert_eq!(tree.nodes.len(), 33);
    let other = tree.nodes.iter().position(|n| n.other).unwrap();
    assert_eq!(tree.path(other).len(), 33);
    assert_eq!(tree.path(other)[31], "d32");
    assert_eq!(tree.nodes[other].name, TreeNode::OTHER);
    // d33..d40: 8 instances, the innermost's 1 µs of self time.
    assert_eq!(tree.nodes[other].instances, 8);
    assert_eq!(tree.nodes[other].self_time.total_ns, 1_000);
    assert_eq!(tree.self_ns(), 1_000);
    assert_eq!(
        snap.spans.iter().map(|s| s.self_time.total_ns).sum::<u64>(),
        1_000
    );
}

/// With the tree on, an instance in a node of its name is recorded in the node only, and the
/// name's instance figures are the sum of its nodes'; in an other node, or with the tree off,
/// per name. Both give the same per-name statistics, to the nanosecond: leaves and parents,
/// re-entered spans, recursion, a span entered on two threads, and spans past the depth bound.
#[test]
fn the_per_name_statistics_are_the_same_with_the_tree_on_or_off() {
    let run = |tree: bool| {
        let (dispatch, guard, clock) = support::mock_with(ProfileLayer::builder().with_tree(tree));
        let tick = |us: u64| clock.advance(std::time::Duration::from_micros(us));
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..20u64 {
                info_span!("outer").in_scope(|| {
                    tick(1 + i % 3);
                    info_span!("leaf").in_scope(|| tick(2 + i % 5));
                    info_span!("mid").in_scope(|| {
                        info_span!("leaf").in_scope(|| tick(7));
                        // Recursion: collapses onto the outer node of its name.
                        info_span!("outer").in_scope(|| tick(1));
                    });
                });
                // Entered three times before it closes.
                let reentered = info_span!("polled");
                for _ in 0..3 {
                    reentered.in_scope(|| tick(4 + i % 2));
                    tick(1);
                }
            }
            // Entered here and on another thread.
            let shared = info_span!("shared");
            shared.in_scope(|| tick(3));
            std::thread::scope(|s| {
                s.spawn(|| {
                    tracing::dispatcher::with_default(&dispatch, || shared.in_scope(|| tick(5)))
                });
            });
            drop(shared);
            // 40 levels: the 8 below the bound are in an other node.
            nest!(tick(1); d01 d02 d03 d04 d05 d06 d07 d08 d09 d10 d11 d12 d13 d14 d15 d16 d17
                d18 d19 d20 d21 d22 d23 d24 d25 d26 d27 d28 d29 d30 d31 d32 d33 d34 d35 d36 d37
                d38 d39 d40);
        });
        let snap = guard.snapshot();
        assert_eq!(snap.tree.is_some(), tree);
        snap
    };
    let (on, off) = (run(true), run(false));
    assert_eq!(on.spans.len(), off.spans.len());
    for span in &on.spans {
        let same = support::span(&off, &span.name);
        assert_eq!(
            serde_json::to_value(span).unwrap(),
            serde_json::to_value(same).unwrap(),
            "{}",
            span.name
        );
    }
    // Not vacuous: every kind of instance is there.
    let outer = support::span(&on, "outer");
    assert_eq!(outer.instances, 40);
    assert!(outer.busy.total_ns > outer.self_time.total_ns);
    assert_eq!(support::span(&on, "polled").calls, 60);
    assert_eq!(support::span(&on, "shared").busy.total_ns, 8_000);
    assert_eq!(support::span(&on, "d40").self_time.total_ns, 1_000);
}

#[test]
fn merging_trees_is_exact() {
    let run = || {
        let (dispatch, guard) = support::install(ProfileLayer::builder());
        tracing::dispatcher::with_default(&dispatch, nested_work);
        guard.snapshot().tree.unwrap()
    };
    let (a, b) = (run(), run());
    let mut merged = a.clone();
    merged.merge(&b);
    assert_eq!(merged.nodes.len(), a.nodes.len());
    for (i, m) in merged.nodes.iter().enumerate() {
        let path = merged.path(i).join(";");
        let (x, y) = (node(&a, &path), node(&b, &path));
        assert_eq!(m.calls, x.calls + y.calls, "{path}");
        assert_eq!(m.instances, x.instances + y.instances);
        assert_eq!(m.wall_ns, x.wall_ns + y.wall_ns);
        assert_eq!(
            m.self_time.total_ns,
            x.self_time.total_ns + y.self_time.total_ns
        );
        assert_eq!(m.busy.count, x.busy.count + y.busy.count);
        assert_eq!(m.busy.min_ns, x.busy.min_ns.min(y.busy.min_ns));
        assert_eq!(m.busy.max_ns, x.busy.max_ns.max(y.busy.max_ns));
        // Bucket by bucket.
        for (value, count) in x.busy.histogram.iter().chain(y.busy.histogram.iter()) {
            assert!(m.busy.histogram.count_at(value) >= count);
        }
        assert_eq!(
            m.busy.histogram.len(),
            x.busy.histogram.len() + y.busy.histogram.len()
        );
    }
    // A path only one side has is appended under its parent.
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    tracing::dispatcher::with_default(&dispatch, || {
        info_span!("outer").in_scope(|| info_span!("new_child").in_scope(|| {}));
    });
    let c = guard.snapshot().tree.unwrap();
    let mut merged = a.clone();
    merged.merge(&c);
    assert_eq!(merged.nodes.len(), a.nodes.len() + 1);
    assert_eq!(node(&merged, "outer;new_child").instances, 1);
    assert_eq!(node(&merged, "outer").instances, 2);
}

#[test]
fn the_tree_off_records_none_and_writes_no_tree_files() {
    let dir = support::temp_dir("tree-off");
    let (dispatch, guard) = support::install(
        ProfileLayer::builder()
            .with_tree(false)
            .with_output_dir(&dir),
    );
    tracing::dispatcher::with_default(&dispatch, nested_work);
    assert!(guard.snapshot().tree.is_none());
    guard.finish().unwrap();
    assert!(dir.join("profile.json").exists());
    for file in ["profile.folded", "flamegraph.svg", "profile.pb.gz"] {
        assert!(!dir.join(file).exists(), "{file}");
    }
}

/// A run with a tree, its files in a fresh directory.
fn written_run(name: &str) -> (std::path::PathBuf, Snapshot) {
    let dir = support::temp_dir(name);
    let (dispatch, guard, clock) =
        support::mock_with(ProfileLayer::builder().with_output_dir(&dir));
    let tick = |us| clock.advance(std::time::Duration::from_micros(us));
    tracing::dispatcher::with_default(&dispatch, || {
        info_span!("train").in_scope(|| {
            for step in 0..5 {
                info_span!("step").in_scope(|| {
                    tick(1);
                    info_span!("forward").in_scope(|| tick(10 + step));
                    info_span!("backward").in_scope(|| tick(20 + step));
                });
            }
        });
        info_span!("eval").in_scope(|| tick(7));
    });
    let handle = guard.handle();
    guard.finish().unwrap();
    (dir, handle.snapshot())
}

#[test]
fn folded_stacks_sum_to_the_self_totals() {
    let (dir, snap) = written_run("tree-folded");
    let text = std::fs::read_to_string(dir.join("profile.folded")).unwrap();
    let mut sum = 0;
    for line in text.lines() {
        let (stack, ns) = line.rsplit_once(' ').unwrap();
        let ns: u64 = ns.parse().unwrap();
        sum += ns;
        let leaf = stack.rsplit(';').next().unwrap();
        let expected: u64 = snap
            .tree
            .as_ref()
            .unwrap()
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| snap.tree.as_ref().unwrap().path(*i).join(";") == stack)
            .map(|(_, n)| n.self_time.total_ns)
            .sum();
        assert_eq!(ns, expected, "{leaf}");
    }
    let names: u64 = snap.spans.iter().map(|s| s.self_time.total_ns).sum();
    assert_eq!(sum, names);
    assert!(text.contains("train;step;forward 60000\n"), "{text}");
    assert!(text.contains("train;step;backward 110000\n"), "{text}");
    assert!(text.contains("eval 7000\n"), "{text}");
}

#[cfg(feature = "flamegraph")]
#[test]
fn the_flamegraph_renders_in_a_browser_with_every_frame() {
    let (dir, snap) = written_run("tree-svg");
    let svg = dir.join("flamegraph.svg");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg"), "{text}");
    let chromium = std::path::Path::new("/usr/bin/chromium");
    if !chromium.exists() {
        eprintln!("SKIPPED: no /usr/bin/chromium: the flamegraph was not opened in a browser");
        return;
    }
    let profile = support::temp_dir("tree-chromium");
    let out = support::headless_chromium(chromium, &profile)
        .arg("--dump-dom")
        .arg(format!("file://{}", svg.display()))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    // The document parsed as SVG and its script ran (it fills in the details line).
    assert!(dom.contains("<svg"), "{dom}");
    // Every span is a frame, its title the self time under it and its share of the profile's
    // 182 µs: train's steps 5 × 1, forward 60, backward 110; eval 7.
    let total: u64 = snap.spans.iter().map(|s| s.self_time.total_ns).sum();
    assert_eq!(total, 5_000 + 60_000 + 110_000 + 7_000);
    for title in [
        "train (175,000 ns, 96.15%)",
        "step (175,000 ns, 96.15%)",
        "forward (60,000 ns, 32.97%)",
        "backward (110,000 ns, 60.44%)",
        "eval (7,000 ns, 3.85%)",
    ] {
        assert!(dom.contains(title), "{title} missing from\n{dom}");
    }
}

#[cfg(feature = "pprof")]
#[test]
fn go_tool_pprof_reads_the_profile_with_matching_totals() {
    let (dir, snap) = written_run("tree-pprof");
    let pb = dir.join("profile.pb.gz");
    let go = std::path::Path::new("/usr/bin/go");
    if !go.exists() {
        eprintln!("SKIPPED: no /usr/bin/go: profile.pb.gz was not read by go tool pprof");
        return;
    }
    let cache = support::temp_dir("tree-gocache");
    let out = std::process::Command::new(go)
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .arg(&pb)
        .env("GOCACHE", &cache)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("HOME", &cache)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Samples: "calls self busy: loc loc ..." lines between "Samples:" and "Locations".
    let samples = text
        .split("Samples:")
        .nth(1)
        .and_then(|s| s.split("Locations").next())
        .unwrap_or_else(|| panic!("{text}"));
    let mut sums = [0u64; 3];
    let mut stacks = 0;
    for line in samples.lines() {
        let Some((values, _locations)) = line.split_once(':') else {
            continue;
        };
        let values: Vec<u64> = match values.split_whitespace().map(str::parse).collect() {
            Ok(v) => v,
            Err(_) => continue,
        };
        if values.len() == 3 {
            stacks += 1;
            for (s, v) in sums.iter_mut().zip(values) {
                *s += v;
            }
        }
    }
    assert!(
        samples.contains("calls/count self_ns/nanoseconds[dflt] busy_ns/nanoseconds"),
        "{text}"
    );
    let tree = snap.tree.as_ref().unwrap();
    assert_eq!(stacks, tree.nodes.len());
    let names_self: u64 = snap.spans.iter().map(|s| s.self_time.total_ns).sum();
    assert_eq!(sums[1], names_self, "{text}");
    assert_eq!(sums[0], tree.nodes.iter().map(|n| n.calls).sum::<u64>());
    assert_eq!(
        sums[2],
        tree.nodes.iter().map(|n| n.busy.total_ns).sum::<u64>()
    );
    // One location per call-path frame, named by its span.
    for name in ["train", "step", "forward", "backward", "eval"] {
        assert!(text.contains(&format!(" {name} ")), "{name} in\n{text}");
    }
}

/// For every node: busy = self + the children's busy − what the children ran detached from
/// it (`TreeNode::detached_ns`), exactly (no sampling, no recursion, within the bounds).
fn assert_nodes_add_up(tree: &CallTree) {
    let (children, _) = tree.children();
    for (i, n) in tree.nodes.iter().enumerate() {
        let inside: u64 = children[i]
            .iter()
            .map(|&c| tree.nodes[c].busy_ns() - tree.nodes[c].detached_ns)
            .sum();
        assert_eq!(
            n.busy_ns(),
            n.self_ns() + inside,
            "busy = self + children at {}",
            tree.path(i).join(";")
        );
    }
}

/// A model's layers: spans created once with the model, outside any pass, and entered inside
/// every `forward`, in training and in evaluation (the mission's central case).
#[test]
fn a_layer_created_once_sits_under_each_pass_that_enters_it() {
    use std::time::Duration;
    let (dispatch, guard, clock) = support::mock();
    tracing::dispatcher::with_default(&dispatch, || {
        let layers: Vec<_> = (0..3)
            .map(|layer| tracing::debug_span!("linear", layer))
            .collect();
        let forward = |clock: &spanprof::clock::MockClock| {
            info_span!("forward").in_scope(|| {
                clock.advance(Duration::from_micros(5));
                for layer in &layers {
                    let _e = layer.enter();
                    clock.advance(Duration::from_micros(100));
                }
            })
        };
        info_span!("train").in_scope(|| {
            for _ in 0..4 {
                info_span!("train_step").in_scope(|| {
                    forward(&clock);
                    info_span!("backward").in_scope(|| clock.advance(Duration::from_micros(300)));
                });
            }
            info_span!("evaluate").in_scope(|| forward(&clock));
        });
        drop(layers);
    });
    let snap = guard.snapshot();
    let tree = snap.tree.as_ref().unwrap();
    let paths: Vec<String> = (0..tree.nodes.len())
        .map(|i| tree.path(i).join(";"))
        .collect();
    assert!(
        !paths.iter().any(|p| p == "linear"),
        "no layer at the root: {paths:?}"
    );
    let train = node(tree, "train;train_step;forward;linear");
    assert_eq!((train.calls, train.busy_ns()), (12, 1_200_000));
    let eval = node(tree, "train;evaluate;forward;linear");
    assert_eq!((eval.calls, eval.busy_ns()), (3, 300_000));
    // Each layer's one instance is counted once, in the path of its last entry.
    assert_eq!(eval.instances + train.instances, 3);
    let forward = node(tree, "train;train_step;forward");
    assert_eq!(
        (forward.busy_ns(), forward.self_ns()),
        (4 * 305_000, 4 * 5_000)
    );
    assert_nodes_add_up(tree);
    // The table agrees: calls and self per name are the nodes' sums.
    let linear = support::span(&snap, "linear");
    assert_eq!(linear.calls, 15);
    assert_eq!(linear.entry_self.total_ns, 1_500_000);
    // The folded stacks put the layers under the passes too.
    let folded = spanprof::output::Folded.to_string(&snap);
    assert!(
        folded.contains("train;train_step;forward;linear 1200000"),
        "{folded}"
    );
    assert!(
        !folded.lines().any(|l| l.starts_with("linear ")),
        "{folded}"
    );
}

/// A spawned task keeps the path it was created in, and its time, run detached from its
/// creator's entries, is said so: every node still adds up.
#[test]
fn spawned_tasks_keep_their_creation_path_and_every_node_adds_up() {
    let (dispatch, guard) = support::install(ProfileLayer::builder());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let _d = tracing::dispatcher::set_default(&dispatch);
    runtime.block_on(async {
        use tracing::instrument::WithSubscriber;
        use tracing::Instrument;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let request = info_span!("request");
            let dispatch = dispatch.clone();
            let task = request.in_scope(|| {
                tokio::spawn(
                    async move {
                        for _ in 0..3 {
                            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                            info_span!("db").in_scope(|| std::hint::black_box(1));
                        }
                    }
                    .instrument(info_span!("handler"))
                    .with_subscriber(dispatch),
                )
            });
            tasks.push(task);
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    drop(runtime);
    let snap = guard.snapshot();
    let tree = snap.tree.as_ref().unwrap();
    let handler = node(tree, "request;handler");
    assert!(handler.calls >= 8 * 4, "entered at every poll");
    assert!(handler.detached_ns > 0, "polled outside `request`");
    assert_eq!(node(tree, "request;handler;db").calls, 24);
    assert_nodes_add_up(tree);
}
