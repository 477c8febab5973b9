//! Numbers for people: durations, bytes and counts in human units, three significant digits.

/// Formats nanoseconds in human units with three significant digits (`812 ns`, `1.25 ms`).
pub(crate) fn format_duration(ns: u64) -> String {
    let ns = ns as f64;
    let (value, unit) = if ns < 1e3 {
        return format!("{ns:.0} ns");
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else if ns < 1e3 * 1e9 {
        (ns / 1e9, "s")
    } else if ns < 1e3 * 60e9 {
        (ns / 60e9, "min")
    } else {
        (ns / 3600e9, "h")
    };
    three_digits(value, unit)
}

fn three_digits(value: f64, unit: &str) -> String {
    if value < 10.0 {
        format!("{value:.2} {unit}")
    } else if value < 100.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// Formats a byte count in binary units (`812 B`, `1.25 MiB`); negative values keep their sign.
pub(crate) fn format_bytes(bytes: f64) -> String {
    let sign = if bytes < 0.0 { "-" } else { "" };
    let b = bytes.abs();
    let units = [
        ("B", 1.0),
        ("KiB", 1024.0),
        ("MiB", 1048576.0),
        ("GiB", 1073741824.0),
        ("TiB", 1099511627776.0),
    ];
    let chosen = largest_unit(b, &units);
    if chosen.1 == 1.0 {
        return format!("{sign}{b:.0} B");
    }
    format!("{sign}{}", three_digits(b / chosen.1, chosen.0))
}

/// The largest unit (name, size) not larger than `value`; the first one for smaller values.
fn largest_unit<'a>(value: f64, units: &[(&'a str, f64)]) -> (&'a str, f64) {
    units
        .iter()
        .copied()
        .take_while(|u| value >= u.1)
        .last()
        .unwrap_or(units[0])
}

/// Formats a count or rate with an SI prefix (`1.25 k`, `3.40 G`).
pub(crate) fn format_si(value: f64) -> String {
    let prefixes = [
        ("", 1.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let chosen = largest_unit(value, &prefixes);
    if chosen.1 == 1.0 {
        return if value.fract() == 0.0 {
            format!("{value:.0}")
        } else {
            format!("{value:.2}")
        };
    }
    three_digits(value / chosen.1, chosen.0)
        .trim_end()
        .to_string()
}

/// Exact counts where they fit a 7-character column, SI prefixes beyond.
pub(crate) fn format_count(n: u64) -> String {
    if n < 10_000_000 {
        n.to_string()
    } else {
        format_si(n as f64)
    }
}

#[cfg(test)]
mod tests {
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
    }

    #[test]
    fn si_counts() {
        assert_eq!(format_si(12.0), "12");
        assert_eq!(format_si(1_250.0), "1.25 k");
        assert_eq!(format_si(3.4e9), "3.40 G");
    }
}
