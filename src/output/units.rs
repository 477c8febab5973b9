//! Numbers and names for people, as every report writes them: durations, bytes and counts in
//! human units, three significant digits, and names with their control characters escaped.
//! Public for renderers of your own (the `spanprof` command writes its findings with them), so
//! a figure reads the same in yours as in spanprof's reports.
//!
//! Every value is rounded to what will be printed (three significant digits) *before* its unit
//! is chosen, so a value that rounds up to the next unit is printed in that unit: 999,500 ns is
//! `1.00 ms`, not `1000 µs`; 1,048,575 B is `1.00 MiB`, not `1024 KiB`.

use crate::profile::figures::{Kind, Value};

/// A unit: its name and its size in the base unit.
type Unit = (&'static str, f64);

const TIME_UNITS: [Unit; 7] = [
    ("ns", 1.0),
    ("µs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
    ("min", 60e9),
    ("h", 3600e9),
    ("d", 86400e9),
];

const BYTE_UNITS: [Unit; 5] = [
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1048576.0),
    ("GiB", 1073741824.0),
    ("TiB", 1099511627776.0),
];

const SI_PREFIXES: [Unit; 6] = [
    ("", 1.0),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
];

/// Formats nanoseconds in human units with three significant digits (`812 ns`, `1.25 ms`).
/// Seconds go up to `999 s`, minutes to `999 min` and hours to `999 h`, then days: at most 8
/// characters up to `u64::MAX` ns (`213504 d`).
pub fn format_duration(ns: u64) -> String {
    format_duration_f64(ns as f64)
}

/// Formats a duration of `ns` nanoseconds that need not be whole (a mean), as
/// [`format_duration`] does: rounded once, to what is printed (3,304.9 ns is `3.30 µs`; rounded
/// to whole nanoseconds first, 3,305 ns, it would print `3.31 µs`). Negative and NaN values
/// print as `0 ns`.
pub fn format_duration_f64(ns: f64) -> String {
    let ns = if ns > 0.0 { ns } else { 0.0 };
    // No decimals in the base unit.
    let (text, unit) = scale(ns, &TIME_UNITS, 1000.0, 0);
    format!("{text} {unit}")
}

/// A figure's value for people, by its kind: counts exact below ten million, sums of fields
/// and rates with SI prefixes, durations and bytes in human units, shares with one decimal
/// (`51.9%`), energy in joules (`0.125 J`), mass in grams (`0.0310 g`).
pub(crate) fn format_value(kind: Kind, value: Value) -> String {
    match (kind, value) {
        (Kind::Count, Value::Int(n)) => format_count(n),
        (Kind::Duration, Value::Int(ns)) => format_duration(ns),
        (Kind::Duration, v) => format_duration_f64(v.as_f64()),
        (Kind::Bytes, v) => format_bytes(v.as_f64()),
        (Kind::Percent, v) => format!("{:.1}%", v.as_f64()),
        (Kind::Energy, v) => format!("{:.3} J", v.as_f64()),
        (Kind::Mass, v) => format!("{:.4} g", v.as_f64()),
        (_, v) => format_si(v.as_f64()),
    }
}

/// Formats a byte count in binary units (`812 B`, `1.25 MiB`); negative values keep their sign.
/// A unit holds values up to 1023 (`1023 KiB`), then the next one takes over.
pub fn format_bytes(bytes: f64) -> String {
    let sign = if bytes < 0.0 { "-" } else { "" };
    let (text, unit) = scale(bytes.abs(), &BYTE_UNITS, 1024.0, 0);
    format!("{sign}{text} {unit}")
}

/// Formats a count or rate with an SI prefix (`1.25 k`, `3.40 G`); below 1000, whole numbers
/// as they are (`12`) and fractions with three significant digits (`12.5`, `0.50`).
pub(crate) fn format_si(value: f64) -> String {
    let whole = value.fract() == 0.0;
    let decimals = if whole { 0 } else { 2 };
    let (text, prefix) = scale(value, &SI_PREFIXES, 1000.0, decimals);
    if prefix.is_empty() {
        text
    } else {
        format!("{text} {prefix}")
    }
}

/// Exact counts where they fit a 7-character column, SI prefixes beyond.
pub fn format_count(n: u64) -> String {
    if n < 10_000_000 {
        n.to_string()
    } else {
        format_si(n as f64)
    }
}

/// Formats a metric's value in its unit ([`crate::profile::metrics::unit_of`]): durations and
/// bytes in human units (`1.25 ms`, `3.00 MiB`), ratios as percentages (`12.5%`), plain numbers
/// with three significant digits (`0.517`, `0.0333`, `1.25 k`, `3.00e-4`), whole ones as they
/// are (`384`).
pub(crate) fn format_metric(value: f64, unit: Option<&str>) -> String {
    let time = |ns: f64| {
        if ns >= 0.0 && ns.is_finite() {
            format_duration_f64(ns)
        } else {
            format!("{} s", format_number(ns / 1e9))
        }
    };
    match unit {
        Some("seconds") => time(value * 1e9),
        Some("milliseconds") => time(value * 1e6),
        Some("microseconds") => time(value * 1e3),
        Some("nanoseconds") => time(value),
        Some("bytes") => format_bytes(value),
        Some("ratio") => format!("{}%", format_number(value * 100.0)),
        Some("percent") => format!("{}%", format_number(value)),
        _ => format_number(value),
    }
}

/// A plain number: whole numbers below 10 million as they are, others with three significant
/// digits (SI prefixes from 1000, an exponent below 0.001).
fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e7 {
        return format!("{value:.0}");
    }
    if value.abs() < 1e-3 {
        return format!("{value:.2e}");
    }
    if value.abs() >= 1000.0 {
        let sign = if value < 0.0 { "-" } else { "" };
        return format!("{sign}{}", format_si(value.abs()));
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).clamp(0, 12) as usize;
    format!("{value:.decimals$}")
}

/// `value` as printed in the first unit of `units` whose printed value stays below `limit`
/// (the last unit takes any value), and that unit. In the first (base) unit the value has at
/// most `base_decimals` decimals; in the others, three significant digits.
fn scale(value: f64, units: &[Unit], limit: f64, base_decimals: usize) -> (String, &'static str) {
    let mut chosen = (String::new(), units[0].0);
    for (i, &(name, size)) in units.iter().enumerate() {
        let max_decimals = if i == 0 { base_decimals } else { 2 };
        let (rounded, decimals) = three_digits(value, size, max_decimals);
        chosen = (format!("{rounded:.decimals$}"), name);
        if rounded < limit {
            break;
        }
    }
    chosen
}

/// `value ÷ size` (not negative) rounded to three significant digits, with at most
/// `max_decimals` decimals, and the decimals to print it with: 2 below 10, 1 below 100, 0 from
/// 100. The number of decimals follows the rounded value (9.996 is `10.0`, not `10.00`).
fn three_digits(value: f64, size: f64, max_decimals: usize) -> (f64, usize) {
    let v = value / size;
    let mut decimals = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    }
    .min(max_decimals);
    loop {
        let scale = 10f64.powi(decimals as i32);
        // Scaled before the division: 9,995 ns × 100 ÷ 1000 is 999.5 exactly and rounds up,
        // where 9,995 ÷ 1000 is 9.99499… in binary floating point and would round down.
        let rounded = (value * scale / size).round() / scale;
        // 2 decimals hold values below 10, 1 decimal values below 100.
        if decimals > 0 && rounded >= 10f64.powi(3 - decimals as i32) {
            decimals -= 1;
            continue;
        }
        return (rounded, decimals);
    }
}

/// `text` with its control characters ([`char::is_control`]) and U+2028, U+2029 (line and
/// paragraph separators) escaped by [`char::escape_default`]; the other characters as they
/// are. How every text report prints a span or metric name, so that a name stays on its row:
///
/// ```
/// use spanprof::output::escape_controls;
/// assert_eq!(escape_controls("load\nbatch\t3"), r"load\nbatch\t3");
/// assert_eq!(escape_controls("ünï 名前"), "ünï 名前");
/// ```
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn metric_values_in_their_units() {
        use super::format_metric;
        for (value, unit, text) in [
            (384.0, None, "384"),
            (-2.0, None, "-2"),
            (0.5171, None, "0.517"),
            (0.03333, None, "0.0333"),
            (3e-4, None, "3.00e-4"),
            (12_345.6, None, "12.3 k"),
            (-12_345.6, None, "-12.3 k"),
            (0.00125, Some("seconds"), "1.25 ms"),
            (1.5, Some("milliseconds"), "1.50 ms"),
            (3.0 * 1024.0 * 1024.0, Some("bytes"), "3.00 MiB"),
            (0.815, Some("ratio"), "81.5%"),
            (12.5, Some("percent"), "12.5%"),
            (-0.5, Some("seconds"), "-0.500 s"),
        ] {
            assert_eq!(format_metric(value, unit), text, "{value} {unit:?}");
        }
    }

    use super::*;

    #[test]
    fn durations_in_human_units() {
        assert_eq!(format_duration(0), "0 ns");
        assert_eq!(format_duration(999), "999 ns");
        assert_eq!(format_duration(1_234), "1.23 µs");
        assert_eq!(format_duration(12_345_678), "12.3 ms");
        assert_eq!(format_duration(123_456_789), "123 ms");
        assert_eq!(format_duration(2_500_000_000), "2.50 s");
        assert_eq!(format_duration(3_600_000_000_000), "60.0 min");
        assert_eq!(format_duration(36_000_000_000_000), "600 min");
        assert_eq!(format_duration(360_000_000_000_000), "100 h");
        assert_eq!(format_duration(u64::MAX), "213504 d");
    }

    #[test]
    fn durations_round_to_three_digits_before_the_unit_is_chosen() {
        let cases = [
            // ns → µs
            (999, "999 ns"),
            (1_000, "1.00 µs"),
            (1_004, "1.00 µs"),
            (1_006, "1.01 µs"),
            // 2 → 1 decimal, 1 → 0 decimals, µs → ms
            (9_994, "9.99 µs"),
            (9_995, "10.0 µs"),
            (99_949, "99.9 µs"),
            (99_950, "100 µs"),
            (999_499, "999 µs"),
            (999_500, "1.00 ms"),
            (1_000_000, "1.00 ms"),
            // ms → s
            (9_994_999, "9.99 ms"),
            (9_995_000, "10.0 ms"),
            (99_949_999, "99.9 ms"),
            (99_950_000, "100 ms"),
            (999_499_999, "999 ms"),
            (999_500_000, "1.00 s"),
            // s → min at 1000 s, min → h at 1000 min
            (9_995_000_000, "10.0 s"),
            (99_950_000_000, "100 s"),
            (999_499_999_999, "999 s"),
            (999_500_000_000, "16.7 min"),
            (59_969_999_999_999, "999 min"),
            (59_970_000_000_000, "16.7 h"),
            (3_598_199_999_999_999, "999 h"),
            (3_598_200_000_000_000, "41.6 d"),
        ];
        for (ns, text) in cases {
            assert_eq!(format_duration(ns), text, "{ns} ns");
        }
    }

    /// A duration that is not a whole number of nanoseconds (a mean) is rounded once, to what
    /// is printed: 3,304.9 ns is 3.30 µs (rounded to 3,305 ns first, it read 3.31 µs).
    #[test]
    fn fractional_durations_are_rounded_once() {
        for (ns, text) in [
            (3_304.9, "3.30 µs"),
            (3_304.999, "3.30 µs"),
            (3_305.0, "3.31 µs"),
            (3_305.1, "3.31 µs"),
            (3_295.0, "3.30 µs"),
            (3_294.9, "3.29 µs"),
            (999.4, "999 ns"),
            (999.5, "1.00 µs"),
            (0.4, "0 ns"),
            (0.5, "1 ns"),
            (9_994.9, "9.99 µs"),
            (9_995.0, "10.0 µs"),
            (99_949.9, "99.9 µs"),
            (999_499.9, "999 µs"),
            (999_500.0, "1.00 ms"),
            (-1.0, "0 ns"),
            (f64::NAN, "0 ns"),
        ] {
            assert_eq!(format_duration_f64(ns), text, "{ns} ns");
        }
        // Whole values as format_duration prints them.
        for ns in [0, 999, 1_004, 9_995, 3_304, 3_305, 999_500, 123_456_789] {
            assert_eq!(format_duration_f64(ns as f64), format_duration(ns), "{ns}");
        }
        // A metric in nanoseconds too.
        assert_eq!(format_metric(3_304.9, Some("nanoseconds")), "3.30 µs");
        assert_eq!(format_metric(3.3049e-6, Some("seconds")), "3.30 µs");
        assert_eq!(
            format_value(Kind::Duration, Value::Real(3_304.9)),
            "3.30 µs"
        );
    }

    #[test]
    fn bytes_round_to_three_digits_before_the_unit_is_chosen() {
        const KIB: f64 = 1024.0;
        const MIB: f64 = KIB * KIB;
        const GIB: f64 = MIB * KIB;
        let cases = [
            (0.0, "0 B"),
            (1023.0, "1023 B"),
            (1023.4, "1023 B"),
            (1023.6, "1.00 KiB"),
            (1024.0, "1.00 KiB"),
            (9.994 * KIB, "9.99 KiB"),
            (9.996 * KIB, "10.0 KiB"),
            (99.94 * KIB, "99.9 KiB"),
            (99.96 * KIB, "100 KiB"),
            (1000.0 * KIB, "1000 KiB"),
            (1023.4 * KIB, "1023 KiB"),
            (1_048_575.0, "1.00 MiB"),
            (MIB, "1.00 MiB"),
            (9.996 * MIB, "10.0 MiB"),
            (GIB - 1.0, "1.00 GiB"),
            (1024.0 * GIB - 1.0, "1.00 TiB"),
            (5000.0 * 1024.0 * GIB, "5000 TiB"),
            (-1_048_575.0, "-1.00 MiB"),
            (-1023.0, "-1023 B"),
        ];
        for (bytes, text) in cases {
            assert_eq!(format_bytes(bytes), text, "{bytes} B");
        }
    }

    #[test]
    fn si_counts() {
        assert_eq!(format_si(12.0), "12");
        assert_eq!(format_si(1_250.0), "1.25 k");
        assert_eq!(format_si(3.4e9), "3.40 G");
    }

    #[test]
    fn si_rounds_to_three_digits_before_the_prefix_is_chosen() {
        let cases = [
            (0.0, "0"),
            (0.5, "0.50"),
            (1.0, "1"),
            (1.234, "1.23"),
            (9.994, "9.99"),
            (9.996, "10.0"),
            (12.5, "12.5"),
            (99.94, "99.9"),
            (99.96, "100"),
            (999.0, "999"),
            (999.4, "999"),
            (999.6, "1.00 k"),
            (999.9, "1.00 k"),
            (1_000.0, "1.00 k"),
            (9_995.0, "10.0 k"),
            (99_950.0, "100 k"),
            (999_499.0, "999 k"),
            (999_500.0, "1.00 M"),
            (999.5e6, "1.00 G"),
            (999.5e9, "1.00 T"),
            (999.5e12, "1.00 P"),
            (999.5e15, "1000 P"),
            (2e18, "2000 P"),
        ];
        for (value, text) in cases {
            assert_eq!(format_si(value), text, "{value}");
        }
    }

    #[test]
    fn counts_are_exact_below_ten_million() {
        assert_eq!(format_count(9_999_999), "9999999");
        assert_eq!(format_count(10_000_000), "10.0 M");
        assert_eq!(format_count(999_500_000), "1.00 G");
    }
}
