//! Which span names an output shows: name globs, target globs and a top N, applied to the
//! [`Snapshot`] before any format renders it.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::profile::buckets::new_histogram;
use crate::profile::glob::glob_match;
use crate::profile::{CallTree, Selected, Snapshot, SpanStats, Stat, TreeNode};

/// A selection of span names: the spans whose name matches one of the name globs (all, if
/// none) and whose target matches one of the target globs (all, if none), then the `top` with
/// the most self time.
///
/// Globs match the whole name: `*` is any run of characters, `?` any one character.
/// [`Selection::apply`] gives the profile of the selected names only; every format renders
/// that profile as it renders any other. The live outputs take one from
/// [`Builder::with_output_filter`](crate::Builder::with_output_filter) or
/// `SPANPROF_OUTPUT_FILTER`, `spanprof report` from `--filter` and `--top`.
///
/// What the profile of the selected names keeps:
///
/// - **span names** ([`Snapshot::spans`]): the selected ones (name and target);
/// - **the call tree** ([`Snapshot::tree`]: the console's call tree, the folded stacks, the
///   flamegraph, the pprof profile, the JSON `tree`): the call paths that lead to a selected
///   name. A node is kept if its name is selected or it is an ancestor of a kept node; an
///   ancestor kept only for its place on the path keeps its calls and busy time but not its
///   self time (an empty `self`), so that the tree's self time, and every graph drawn from it,
///   is the selected names' own (an `[other]` node, of spans past the tree's bounds, is kept
///   only if `[other]` is selected: its spans' names are not told apart);
/// - **metrics from events** ([`Snapshot::metrics`]): those recorded inside a selected span
///   name, and those recorded outside every span (they belong to no span name, so no
///   selection of names leaves them out);
/// - everything else (run, resources, overhead, back-off steps, sources) as it was;
/// - and [`Snapshot::selection`]: this selection's text form and the whole profile's span
///   names and self time. Self % stays a share of all the self time inside profiled spans,
///   selected or not, in every output that shows it (the console table and its call tree, CSV
///   `self_pct`, HTML, Markdown), and a report says when the filter matched no span name
///   rather than diagnosing a run that recorded none. Applied to a profile that is a selection
///   already, it keeps the first whole profile's figures.
///
/// The text form (`SPANPROF_OUTPUT_FILTER`, `spanprof report --filter`) is a comma-separated
/// list of terms: a name glob, `target=GLOB`, or `top=N`:
///
/// ```
/// use spanprof::output::Selection;
/// # let snapshot = spanprof::profile::Snapshot::from_json(
/// #     include_str!("../../tests/data/profile-v1-basic.json"), "doc")?;
/// let selection: Selection = "train_*,forward,target=my_app*,top=3".parse()?;
/// assert!(selection.matches("train_step", "my_app::train"));
/// assert!(!selection.matches("forward", "other_crate"));
/// let selected = selection.apply(&snapshot);
/// assert!(selected.spans.len() <= 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Selection {
    /// Globs of span names to keep (all names when empty).
    pub names: Vec<String>,
    /// Globs of span targets to keep (all targets when empty).
    pub targets: Vec<String>,
    /// Keep only this many span names, those with the most self time (all when `None`).
    pub top: Option<usize>,
}

/// What [`Selection`]'s text form accepts, for errors.
pub(crate) const SELECTION_EXPECTED: &str =
    "comma-separated name globs, target=GLOB and top=N (N a positive integer), e.g. train_*,target=my_app*,top=10";

impl Selection {
    /// Every span name.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also keeps the span names that match `glob`.
    pub fn with_name(mut self, glob: impl Into<String>) -> Self {
        self.names.push(glob.into());
        self
    }

    /// Also keeps the spans whose target matches `glob`.
    pub fn with_target(mut self, glob: impl Into<String>) -> Self {
        self.targets.push(glob.into());
        self
    }

    /// Keeps only the `n` selected names with the most self time.
    pub fn with_top(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// Whether this selection keeps everything.
    pub fn is_all(&self) -> bool {
        self.names.is_empty() && self.targets.is_empty() && self.top.is_none()
    }

    /// Whether a span of `name` and `target` passes the globs (before `top`).
    pub fn matches(&self, name: &str, target: &str) -> bool {
        let any = |globs: &[String], text: &str| {
            globs.is_empty() || globs.iter().any(|g| glob_match(g, text))
        };
        any(&self.names, name) && any(&self.targets, target)
    }

    /// The profile of the selected span names only: the selected names, the call paths that
    /// lead to them and the metrics recorded in them or outside every span, with what the
    /// whole profile held in [`Snapshot::selection`]; everything else (run, resources,
    /// sources) as it was. See [`Selection`] for the rules. Selecting every name (no globs, no
    /// top) gives the profile as it is.
    pub fn apply(&self, snapshot: &Snapshot) -> Snapshot {
        let mut selected = snapshot.clone();
        if self.is_all() {
            return selected;
        }
        // What the whole profile held: kept from the first selection where this is one already
        // (`spanprof report --filter` on a profile saved with an output filter).
        let filter = self.to_string();
        selected.selection = Some(match &snapshot.selection {
            Some(whole) => Selected {
                filter: if whole.filter == filter {
                    filter
                } else {
                    format!("{} then {filter}", whole.filter)
                },
                ..whole.clone()
            },
            None => Selected {
                filter,
                span_names: snapshot.spans.len() as u64,
                self_ns: snapshot.totals().self_ns,
            },
        });
        let kept = self.selected_names(snapshot);
        let is_kept = |name: &str, target: &str| kept.contains(&(name, target));
        selected.spans.retain(|s| is_kept(&s.name, &s.target));
        if let Some(tree) = &mut selected.tree {
            *tree = paths_to(tree, |n| is_kept(&n.name, &n.target));
        }
        selected
            .metrics
            .retain(|m| match (&m.span, &m.span_target) {
                (None, _) => true,
                (Some(name), Some(target)) => is_kept(name, target),
                // A metric without its span's target (hand-written profiles): by name alone.
                (Some(name), None) => kept.iter().any(|(n, _)| n == name),
            });
        selected
    }

    /// The (name, target) of every span name of `snapshot` this selection keeps: those the
    /// globs match, then the `top` of them by self time.
    fn selected_names<'a>(&self, snapshot: &'a Snapshot) -> HashSet<(&'a str, &'a str)> {
        let mut matched: Vec<&SpanStats> = snapshot
            .spans
            .iter()
            .filter(|s| self.matches(&s.name, &s.target))
            .collect();
        if let Some(top) = self.top {
            matched.sort_by(|a, b| crate::profile::figures::by_self_time(a, b));
            matched.truncate(top);
        }
        matched
            .into_iter()
            .map(|s| (s.name.as_str(), s.target.as_str()))
            .collect()
    }

    /// Checks the selection: globs not empty, `top` at least 1; the error is what is expected.
    pub(crate) fn check(&self) -> std::result::Result<(), &'static str> {
        if self.names.iter().chain(&self.targets).any(|g| g.is_empty()) {
            return Err(SELECTION_EXPECTED);
        }
        if self.top == Some(0) {
            return Err(SELECTION_EXPECTED);
        }
        Ok(())
    }
}

impl FromStr for Selection {
    type Err = Error;

    /// Parses the text form: comma-separated name globs, `target=GLOB` and `top=N`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming the text, for an empty term or a `top` that is not a
    /// positive integer (the builder and `SPANPROF_OUTPUT_FILTER` name their own source).
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidSetting {
            method: "with_output_filter",
            value: format!("{text:?}"),
            expected: SELECTION_EXPECTED,
        };
        let mut selection = Selection::new();
        for term in text.split(',').map(str::trim) {
            if let Some(glob) = term.strip_prefix("target=") {
                selection.targets.push(glob.trim().to_string());
            } else if let Some(n) = term.strip_prefix("top=") {
                let n: usize = n.trim().parse().map_err(|_| invalid())?;
                selection.top = Some(n);
            } else {
                selection.names.push(term.to_string());
            }
        }
        selection.check().map_err(|_| invalid())?;
        Ok(selection)
    }
}

impl fmt::Display for Selection {
    /// The text form, which [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<String> = self.names.clone();
        terms.extend(self.targets.iter().map(|t| format!("target={t}")));
        terms.extend(self.top.map(|n| format!("top={n}")));
        f.write_str(&terms.join(","))
    }
}

/// The call paths of `tree` that lead to a node `selected` keeps: a node stays if it is
/// selected or an ancestor of a node that stays, in the same order (parents before children);
/// an ancestor that stays only for its place on a path has its self time emptied.
fn paths_to(tree: &CallTree, selected: impl Fn(&TreeNode) -> bool) -> CallTree {
    // Parents come before their children: a parent index not below its child's is malformed
    // (as `CallTree::path` reads it), and the node a root.
    let parent = |i: usize| tree.nodes[i].parent.map(|p| p as usize).filter(|&p| p < i);
    let chosen: Vec<bool> = tree.nodes.iter().map(selected).collect();
    let mut stays = chosen.clone();
    for i in (0..tree.nodes.len()).rev() {
        if stays[i] {
            if let Some(p) = parent(i) {
                stays[p] = true;
            }
        }
    }
    let mut at: Vec<Option<u32>> = vec![None; tree.nodes.len()];
    let mut nodes = Vec::new();
    for (i, node) in tree.nodes.iter().enumerate() {
        if !stays[i] {
            continue;
        }
        let mut node = node.clone();
        node.parent = parent(i).and_then(|p| at[p]);
        if !chosen[i] {
            node.self_time = Stat::new(new_histogram(), 0, 0, 0, 0);
        }
        at[i] = Some(nodes.len() as u32);
        nodes.push(node);
    }
    CallTree::new(nodes, tree.max_nodes, tree.max_depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        for (glob, text, want) in [
            ("train_*", "train_step", true),
            ("train_*", "pretrain_step", false),
            ("*step", "train_step", true),
            ("t?ain*", "train", true),
            ("forward", "forward", true),
            ("forward", "forward2", false),
            ("*", "", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob_match(glob, text), want, "{glob:?} ~ {text:?}");
        }
    }

    #[test]
    fn the_text_form_reads_back_and_bad_terms_are_named() {
        let s: Selection = " train_*, forward ,target=app*,top=3".parse().unwrap();
        assert_eq!(
            s,
            Selection::new()
                .with_name("train_*")
                .with_name("forward")
                .with_target("app*")
                .with_top(3)
        );
        assert_eq!(s.to_string().parse::<Selection>().unwrap(), s);
        for bad in ["", "a,,b", "top=0", "top=x", "target="] {
            let e = bad.parse::<Selection>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
    }

    #[test]
    fn apply_keeps_matching_names_then_the_top_by_self_time() {
        let snapshot = crate::profile::detailed_test_profile();
        let mut by_self: Vec<&SpanStats> = snapshot.spans.iter().collect();
        by_self.sort_by_key(|s| std::cmp::Reverse(s.entry_self.total_ns));
        let first = &by_self[0].name;
        let only = Selection::new().with_name(first.clone()).apply(&snapshot);
        assert!(only.spans.iter().all(|s| &s.name == first));
        assert!(!only.spans.is_empty());
        let top = Selection::new().with_top(2).apply(&snapshot);
        let mut kept: Vec<&str> = top.spans.iter().map(|s| s.name.as_str()).collect();
        let mut want: Vec<&str> = by_self[..2].iter().map(|s| s.name.as_str()).collect();
        kept.sort_unstable();
        want.sort_unstable();
        assert_eq!(kept, want);
        let none = Selection::new()
            .with_target("no_such_target")
            .apply(&snapshot);
        assert!(none.spans.is_empty());
        assert_eq!(none.run, snapshot.run);
        assert_eq!(Selection::new().apply(&snapshot), snapshot);
    }

    fn golden() -> Snapshot {
        Snapshot::from_json(
            include_str!("../../tests/data/golden-profile.json"),
            "golden",
        )
        .unwrap()
    }

    /// The tree keeps the paths to the selected names: a selected node with its self time,
    /// its ancestors with their calls and busy time but no self time, nothing else (the
    /// selected name's unselected children included).
    #[test]
    fn apply_keeps_the_call_paths_to_the_selected_names() {
        let snapshot = golden();
        let whole = snapshot.tree.as_ref().unwrap();
        let node = |tree: &CallTree, path: &str| {
            (0..tree.nodes.len())
                .find(|&i| tree.path(i).join(";") == path)
                .map(|i| tree.nodes[i].clone())
        };
        let selected = Selection::new()
            .with_name("forward")
            .with_name("backward")
            .apply(&snapshot);
        let tree = selected.tree.as_ref().unwrap();
        let mut paths: Vec<String> = (0..tree.nodes.len())
            .map(|i| tree.path(i).join(";"))
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                "train",
                "train;train_step",
                "train;train_step;backward",
                "train;train_step;forward"
            ]
        );
        for path in ["train;train_step;forward", "train;train_step;backward"] {
            let (mut kept, was) = (node(tree, path).unwrap(), node(whole, path).unwrap());
            // As it was, but for its parent's index in the smaller tree.
            kept.parent = was.parent;
            assert_eq!(kept, was, "{path}");
        }
        for path in ["train", "train;train_step"] {
            let (kept, was) = (node(tree, path).unwrap(), node(whole, path).unwrap());
            assert_eq!((kept.calls, &kept.busy), (was.calls, &was.busy), "{path}");
            assert_eq!(
                (kept.self_time.count, kept.self_time.total_ns),
                (0, 0),
                "{path}"
            );
        }
        // Its self time is the selected names' own, as are the folded stacks'.
        let own: u64 = selected.spans.iter().map(|s| s.entry_self.total_ns).sum();
        assert_eq!(tree.self_ns(), own);
        assert_eq!(
            crate::output::Folded.to_string(&selected),
            "train;train_step;forward 1080000\ntrain;train_step;backward 2300000\n"
        );
        // The top N selects the tree's names too; a selection of nothing leaves no node.
        let top = Selection::new().with_top(1).apply(&snapshot);
        let tree = top.tree.as_ref().unwrap();
        let names: Vec<&str> = tree.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["train", "train_step", "backward"]);
        let none = Selection::new().with_name("nothing").apply(&snapshot);
        assert!(none.tree.as_ref().unwrap().nodes.is_empty());
        // Applying it again changes nothing (`spanprof report --filter` on a saved selection).
        let again = Selection::new().with_name("forward").with_name("backward");
        let once = again.apply(&snapshot);
        assert_eq!(again.apply(&once), once);
    }

    /// A selection records the filter and the whole profile's span names and self time (what
    /// self % stays a share of); applied again, it keeps the first whole profile's figures.
    #[test]
    fn apply_records_what_the_whole_profile_held() {
        let snapshot = golden();
        assert_eq!(Selection::new().apply(&snapshot).selection, None);
        let selection: Selection = "forward,backward".parse().unwrap();
        let once = selection.apply(&snapshot);
        let whole = once.selection.clone().unwrap();
        assert_eq!(whole.filter, "forward,backward");
        assert_eq!(whole.span_names, snapshot.spans.len() as u64);
        assert_eq!(whole.self_ns, snapshot.totals().self_ns);
        assert_eq!(once.totals().self_ns, whole.self_ns);
        // Again with the same filter: the same profile; with another: both named.
        assert_eq!(selection.apply(&once), once);
        let narrower = Selection::new().with_name("forward").apply(&once);
        let twice = narrower.selection.unwrap();
        assert_eq!(twice.filter, "forward,backward then forward");
        assert_eq!(
            (twice.span_names, twice.self_ns),
            (whole.span_names, whole.self_ns)
        );
    }
}
