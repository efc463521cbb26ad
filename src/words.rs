//! How counts are written for people: thousands separators, the singular or the plural
//! of the noun after a number ("1 line", "2 lines"), sizes in binary units, and a number
//! a user typed, however extreme. Every report and message uses these, so no output says
//! "1 bursts" or prints a subnormal's 300 decimals.

/// A count with comma thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The noun that goes after `n`: `singular` for exactly one, else `plural`.
pub fn noun<'a>(n: u64, singular: &'a str, plural: &'a str) -> &'a str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// `1 operation`, `2 operations`, `1,234 operations`.
pub fn counted(n: u64, singular: &str, plural: &str) -> String {
    format!("{} {}", count(n), noun(n, singular, plural))
}

/// Bytes in binary units with one decimal: `512 B`, `8.0 MiB`, `1.2 GiB`.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A number as a message quotes it back: as written for everyday magnitudes (`50`, `-0.5`),
/// in exponent form for the extremes (`5e-324`, `1e300`), where the plain form runs to
/// hundreds of digits.
pub fn number(x: f64) -> String {
    let everyday = x == 0.0 || (1e-6..1e15).contains(&x.abs()) || !x.is_finite();
    if everyday {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_counts_with_separators_and_the_right_noun() {
        let cases = [
            (0, "0", "0 lines"),
            (1, "1", "1 line"),
            (999, "999", "999 lines"),
            (1_000, "1,000", "1,000 lines"),
            (1_234_567, "1,234,567", "1,234,567 lines"),
        ];
        for (n, plain, noun) in cases {
            assert_eq!(count(n), plain);
            assert_eq!(counted(n, "line", "lines"), noun);
        }
    }

    #[test]
    fn extreme_numbers_are_quoted_in_exponent_form() {
        assert_eq!(number(50.0), "50");
        assert_eq!(number(-50.0), "-50");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(5e-324), "5e-324");
        assert_eq!(number(-1e300), "-1e300");
        assert_eq!(number(9.223372036854776e18), "9.223372036854776e18");
    }
}
