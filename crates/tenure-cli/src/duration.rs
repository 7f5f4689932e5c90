//! Durations in the human form: `500ms`, `10s`, `2m`, `1h`, `1d`, `1.5s`,
//! `1m30s`, and bare numbers of seconds (`30`, `0.5`), as flock's `-w` takes.

use std::time::Duration;

/// Parses a duration: a bare number of seconds, or one or more `NUMBER UNIT`
/// parts, units `ms`, `s`, `m`, `h`, `d`; the number may have a fraction.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. 10s or 500ms".into());
    }
    if s.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; a duration is written e.g. 10s or 500ms"
        ));
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return nanos(s, 1_000_000_000, text).and_then(|n| from_nanos(n, text));
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() {
            return Err(format!(
                "{text:?} is not a duration; write e.g. 10s or 500ms"
            ));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let nanos_per_unit: u128 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "" => {
                return Err(format!(
                    "{text:?} has no unit; write e.g. {number}s or {number}ms"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {text:?}; use ms, s, m, h or d"
                ));
            }
        };
        total = total
            .checked_add(nanos(number, nanos_per_unit, text)?)
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = next;
    }
    from_nanos(total, text)
}

/// `total` nanoseconds as a `Duration`, or "too long".
fn from_nanos(total: u128, text: &str) -> Result<Duration, String> {
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| format!("{text:?} is too long"))?;
    // The remainder of a division by 1e9 always fits.
    let sub = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, sub))
}

/// `number` (digits with at most one '.') times `unit` nanoseconds.
fn nanos(number: &str, unit: u128, text: &str) -> Result<u128, String> {
    let bad = || format!("{number:?} in {text:?} is not a number");
    let (int, frac) = match number.split_once('.') {
        Some((_, f)) if f.contains('.') => return Err(bad()),
        Some(("", "")) => return Err(bad()),
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    let too_long = || format!("{text:?} is too long");
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_long())?
    };
    let mut value = int.checked_mul(unit).ok_or_else(too_long)?;
    let mut scale = unit;
    for digit in frac.bytes().take(18) {
        scale /= 10;
        value = value
            .checked_add(u128::from(digit - b'0') * scale)
            .ok_or_else(too_long)?;
    }
    Ok(value)
}

/// Parses a duration that must be greater than zero.
pub fn positive(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!("{text:?} is zero; it must be greater than zero"));
    }
    Ok(d)
}

/// A duration the way a person writes it: `250ms`, `1.5s`, `2m`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        format!("{}µs", d.as_micros())
    } else if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// Whole milliseconds, as the JSON outputs give durations (`ttl_ms`,
/// `held_ms`); `u64::MAX` for a duration too long for that.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse(" 0s "), Ok(Duration::ZERO));
    }

    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
        assert!(parse("1.2.3").unwrap_err().contains("not a number"));
        assert!(
            parse("99999999999999999999999")
                .unwrap_err()
                .contains("too long")
        );
        assert!(positive("0").unwrap_err().contains("zero"));
    }

    #[test]
    fn refuses_with_a_reason() {
        let err = parse("10x").unwrap_err();
        assert!(err.contains("unknown unit \"x\""), "{err}");
        assert!(parse("1m30").unwrap_err().contains("no unit"));
        assert!(parse(".").unwrap_err().contains("not a number"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("s").unwrap_err().contains("not a duration"));
        assert!(parse("1..2s").unwrap_err().contains("not a number"));
        assert!(parse("-1s").unwrap_err().contains("negative"));
        assert!(parse("99999999999999999999999999999999999999d").is_err());
        let edge = format!("{}.9ms", u128::MAX / 1_000_000);
        assert!(parse(&edge).unwrap_err().contains("too long"));
        assert!(positive("0ms").unwrap_err().contains("zero"));
    }

    #[test]
    fn shows_compactly() {
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
        assert_eq!(show(Duration::from_secs(10)), "10s");
        assert_eq!(show(Duration::from_secs(120)), "2m");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
        assert_eq!(show(Duration::from_micros(100)), "100µs");
        assert_eq!(show(Duration::ZERO), "0ms");
    }
}
