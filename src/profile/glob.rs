//! Span-name globs, as the output filter (`SPANPROF_OUTPUT_FILTER`) and the compare policy's
//! per-name rules and budgets match them.

/// Whether `text` matches `glob` whole: `*` any run of characters, `?` any one.
pub(crate) fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t): (Vec<char>, Vec<char>) = (glob.chars().collect(), text.chars().collect());
    // The classic backtracking matcher: remember the last `*` and how much it swallowed.
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match g.get(gi) {
            Some('*') => {
                star = Some((gi, ti));
                gi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                gi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sg, st)) => {
                    gi = sg + 1;
                    ti = st + 1;
                    star = Some((sg, st + 1));
                }
                None => return false,
            },
        }
    }
    g[gi..].iter().all(|&c| c == '*')
}
