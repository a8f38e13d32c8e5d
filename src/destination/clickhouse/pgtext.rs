//! PostgreSQL text forms read into ClickHouse's typed values and written
//! back, exactly: a typed column's value read back from ClickHouse gives
//! the very text the source sent (the audit compares them), and a value the
//! type cannot hold is an error, never a near value.
//!
//! The source's sessions fix the text forms (ISO dates, UTC, shortest exact
//! floats: docs/POSTGRES.md), so each value has one spelling.

/// Microseconds in a day.
const DAY_US: i64 = 86_400_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
pub(super) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
pub(super) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

/// The range `Date32` and `DateTime64` hold: 1900-01-01 to 2299-12-31.
pub(super) const FIRST_DAY: i64 = -25_567;
pub(super) const LAST_DAY: i64 = 120_529;

fn digits(s: &str, what: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 9 {
        return Err(format!("{what} {s:?} is not a number"));
    }
    s.parse()
        .map_err(|_| format!("{what} {s:?} is not a number"))
}

fn out_of_range(s: &str, ty: &str) -> String {
    if s.ends_with("infinity") {
        format!("{s:?} has no {ty} value (ClickHouse has no infinite dates or times)")
    } else {
        format!("{s:?} is outside the range of {ty} (years 1900 to 2299)")
    }
}

/// A `date`'s days since 1970-01-01, within `Date32`'s range.
pub(super) fn parse_date(s: &str) -> Result<i32, String> {
    if s.ends_with("infinity") || s.ends_with(" BC") {
        return Err(out_of_range(s, "Date32"));
    }
    let day = date_days(s)?;
    if !(FIRST_DAY..=LAST_DAY).contains(&day) {
        return Err(out_of_range(s, "Date32"));
    }
    Ok(day as i32)
}

fn date_days(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not an ISO date");
    let mut it = s.splitn(3, '-');
    let (y, m, d) = (
        it.next().ok_or_else(bad)?,
        it.next().ok_or_else(bad)?,
        it.next().ok_or_else(bad)?,
    );
    if y.len() < 4 || m.len() != 2 || d.len() != 2 {
        return Err(bad());
    }
    let (y, m, d) = (
        digits(y, "year")? as i64,
        digits(m, "month")?,
        digits(d, "day")?,
    );
    let day = days_from_civil(y, m, d);
    // 2023-02-30 and the like are no date.
    if civil_from_days(day) != (y, m, d) {
        return Err(bad());
    }
    Ok(day)
}

/// A `date` as PostgreSQL writes it.
pub(super) fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A `timestamp` (`zoned`: `timestamptz`, with its offset) as microseconds
/// since 1970-01-01 00:00:00 UTC, within `DateTime64`'s range.
pub(super) fn parse_timestamp(s: &str, zoned: bool) -> Result<i64, String> {
    if s.ends_with("infinity") || s.ends_with(" BC") {
        return Err(out_of_range(s, "DateTime64"));
    }
    let bad = || format!("{s:?} is not an ISO timestamp");
    let (date, rest) = s.split_once(' ').ok_or_else(bad)?;
    let day = date_days(date)?;
    // The time, its fraction, then (zoned) the offset: +HH, +HH:MM or +HH:MM:SS.
    let (time, offset) = if zoned {
        let at = rest.rfind(['+', '-']).ok_or_else(bad)?;
        (&rest[..at], Some(&rest[at..]))
    } else {
        (rest, None)
    };
    let (hms, frac) = match time.split_once('.') {
        Some((a, f)) => (a, f),
        None => (time, ""),
    };
    let mut p = hms.split(':');
    let (h, mi, se) = (
        p.next().ok_or_else(bad)?,
        p.next().ok_or_else(bad)?,
        p.next().ok_or_else(bad)?,
    );
    if p.next().is_some() || h.len() != 2 || mi.len() != 2 || se.len() != 2 || frac.len() > 6 {
        return Err(bad());
    }
    let (h, mi, se) = (
        digits(h, "hour")?,
        digits(mi, "minute")?,
        digits(se, "second")?,
    );
    // 24:00:00 is a PostgreSQL time of day (the next midnight).
    if h > 24 || mi > 59 || se > 59 || (h == 24 && (mi, se) != (0, 0)) {
        return Err(bad());
    }
    let us = if frac.is_empty() {
        0
    } else {
        digits(frac, "fraction")? as i64 * 10i64.pow(6 - frac.len() as u32)
    };
    let mut t = day * DAY_US + ((h * 3600 + mi * 60 + se) as i64) * 1_000_000 + us;
    if let Some(o) = offset {
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let parts: Vec<&str> = o[1..].split(':').collect();
        if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.len() != 2) {
            return Err(bad());
        }
        let mut secs = 0i64;
        for (k, p) in parts.iter().enumerate() {
            secs += digits(p, "offset")? as i64 * [3600, 60, 1][k];
        }
        t -= sign * secs * 1_000_000;
    }
    if !(FIRST_DAY * DAY_US..(LAST_DAY + 1) * DAY_US).contains(&t) {
        return Err(out_of_range(s, "DateTime64"));
    }
    Ok(t)
}

/// A timestamp as PostgreSQL writes it in UTC: fraction digits only as
/// many as needed, `+00` for `timestamptz`.
pub(super) fn format_timestamp(us: i64, zoned: bool) -> String {
    let day = us.div_euclid(DAY_US);
    let rem = us.rem_euclid(DAY_US);
    let (y, m, d) = civil_from_days(day);
    let secs = rem / 1_000_000;
    let frac = rem % 1_000_000;
    let mut out = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if frac != 0 {
        let f = format!("{frac:06}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    if zoned {
        out.push_str("+00");
    }
    out
}

/// A `uuid`'s 16 bytes, in order.
pub(super) fn parse_uuid(s: &str) -> Result<[u8; 16], String> {
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    let shape_ok = s.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-')
        && hex.len() == 32;
    let mut b = [0u8; 16];
    if !shape_ok || hex::decode_to_slice(&hex, &mut b).is_err() {
        return Err(format!("{s:?} is not a UUID"));
    }
    Ok(b)
}

/// A `uuid` as PostgreSQL writes it (lower case).
pub(super) fn format_uuid(b: &[u8; 16]) -> String {
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A `real` or `double precision` as PostgreSQL writes it with
/// `extra_float_digits` above 0: the shortest digits that read back to the
/// same value, fixed-point for decimal exponents from -4 to 5 (`real`) or
/// 14 (`double precision`), else `d.ddde+XX`.
pub(super) fn format_float(x: f64, single: bool) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits at the width.
    let e = if single {
        format!("{:e}", x as f32)
    } else {
        format!("{x:e}")
    };
    let (neg, e) = match e.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, e.as_str()),
    };
    let (mant, exp) = e.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent");
    let digits: String = mant.chars().filter(|&c| c != '.').collect();
    let n = digits.len() as i32;
    let limit = if single { 6 } else { 15 };
    let body = if digits == "0" {
        "0".to_string()
    } else if (-4..limit).contains(&exp) {
        if exp >= 0 {
            if n <= exp + 1 {
                format!("{digits}{}", "0".repeat((exp + 1 - n) as usize))
            } else {
                let (a, b) = digits.split_at((exp + 1) as usize);
                format!("{a}.{b}")
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let (a, b) = digits.split_at(1);
        let sign = if exp < 0 { '-' } else { '+' };
        if b.is_empty() {
            format!("{a}e{sign}{:02}", exp.abs())
        } else {
            format!("{a}.{b}e{sign}{:02}", exp.abs())
        }
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Whether PostgreSQL's `array_out` quotes an element.
fn needs_quotes(t: &str) -> bool {
    t.is_empty()
        || t.eq_ignore_ascii_case("NULL")
        || t.chars().any(|c| {
            matches!(
                c,
                '{' | '}' | ',' | '"' | '\\' | ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}'
            )
        })
}

/// A one-dimensional array's text form (`{1,NULL,"a b"}`) split into its
/// elements (`None` for NULL). A multi-dimensional array, or one with
/// explicit bounds (`[0:1]={…}`), is refused: `Array(Nullable(T))` holds
/// neither.
pub(super) fn parse_array(s: &str) -> Result<Vec<Option<String>>, String> {
    if s.starts_with('[') {
        return Err(format!(
            "array {s:?} has explicit bounds (its first index is not 1), which a ClickHouse Array cannot keep"
        ));
    }
    let inner = s
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| format!("{s:?} is not an array's text form"))?;
    let mut out = Vec::new();
    if inner.is_empty() {
        return Ok(out);
    }
    let b = inner.as_bytes();
    let mut i = 0;
    loop {
        if b.get(i) == Some(&b'{') {
            return Err(format!(
                "array {s:?} has more than one dimension, which Array(Nullable(T)) cannot hold"
            ));
        }
        let mut el = Vec::new();
        let quoted = b.get(i) == Some(&b'"');
        if quoted {
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(format!("array {s:?} has an unterminated quote")),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        el.push(
                            *b.get(i + 1)
                                .ok_or_else(|| format!("array {s:?} ends in \\"))?,
                        );
                        i += 2;
                    }
                    Some(&c) => {
                        el.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(&c) = b.get(i) {
                if c == b',' {
                    break;
                }
                if matches!(c, b'"' | b'{' | b'}' | b'\\') {
                    return Err(format!("array {s:?} is not in PostgreSQL's output form"));
                }
                el.push(c);
                i += 1;
            }
        }
        let text = String::from_utf8(el).map_err(|_| format!("array {s:?} is not UTF-8"))?;
        out.push(if !quoted && text.eq_ignore_ascii_case("NULL") {
            None
        } else {
            Some(text)
        });
        match b.get(i) {
            None => return Ok(out),
            Some(b',') => i += 1,
            Some(_) => return Err(format!("array {s:?} is not in PostgreSQL's output form")),
        }
    }
}

/// A one-dimensional array as PostgreSQL's `array_out` writes it.
pub(super) fn format_array(elements: &[Option<String>]) -> String {
    let mut out = String::from("{");
    for (k, e) in elements.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        match e {
            None => out.push_str("NULL"),
            Some(t) if needs_quotes(t) => {
                out.push('"');
                for c in t.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
            Some(t) => out.push_str(t),
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_timestamps_round_trip() {
        for s in [
            "1970-01-01",
            "1900-01-01",
            "2299-12-31",
            "1969-12-31",
            "2024-02-29",
        ] {
            assert_eq!(format_date(parse_date(s).unwrap()), s);
        }
        assert_eq!(parse_date("1970-01-02").unwrap(), 1);
        assert_eq!(parse_date("1900-01-01").unwrap() as i64, FIRST_DAY);
        assert_eq!(parse_date("2299-12-31").unwrap() as i64, LAST_DAY);
        for s in [
            "1899-12-31",
            "2300-01-01",
            "infinity",
            "-infinity",
            "0044-03-15 BC",
            "2023-02-30",
        ] {
            assert!(parse_date(s).is_err(), "{s}");
        }
        for (s, z) in [
            ("2024-03-10 02:30:00.123456", false),
            ("1969-12-31 23:59:59.9", false),
            ("1900-01-01 00:00:00", false),
            ("2299-12-31 23:59:59.999999+00", true),
            ("2024-11-03 01:30:00.5+00", true),
        ] {
            assert_eq!(format_timestamp(parse_timestamp(s, z).unwrap(), z), s);
        }
        assert_eq!(
            parse_timestamp("1970-01-01 00:00:00.000001", false).unwrap(),
            1
        );
        assert_eq!(
            parse_timestamp("1969-12-31 23:59:59.999999", false).unwrap(),
            -1
        );
        // Another offset is the same instant.
        assert_eq!(
            parse_timestamp("2024-01-01 05:30:00+05:30", true).unwrap(),
            parse_timestamp("2024-01-01 00:00:00+00", true).unwrap()
        );
        for s in [
            "infinity",
            "1899-12-31 23:59:59.999999",
            "2300-01-01 00:00:00",
            "2024-01-01 25:00:00",
            "2024-01-01",
        ] {
            assert!(parse_timestamp(s, false).is_err(), "{s}");
        }
    }

    /// A small deterministic generator (xorshift) for the random cases.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn random_values_round_trip_through_their_text() {
        let mut next = rng(0x9e37_79b9_7f4a_7c15);
        let span = (LAST_DAY + 1 - FIRST_DAY) * DAY_US;
        for _ in 0..20_000 {
            // Any microsecond of the range, either text form.
            let us = FIRST_DAY * DAY_US + (next() % span as u64) as i64;
            for zoned in [false, true] {
                let t = format_timestamp(us, zoned);
                assert_eq!(parse_timestamp(&t, zoned), Ok(us), "{t}");
            }
            let day = FIRST_DAY + (next() % (LAST_DAY - FIRST_DAY + 1) as u64) as i64;
            let d = format_date(day as i32);
            assert_eq!(parse_date(&d), Ok(day as i32), "{d}");
            // Any finite double and float: the text reads back to its bits.
            let x = f64::from_bits(next());
            if x.is_finite() {
                assert_eq!(
                    format_float(x, false).parse::<f64>().map(f64::to_bits),
                    Ok(x.to_bits())
                );
            }
            let f = f32::from_bits(next() as u32);
            if f.is_finite() {
                let t = format_float(f as f64, true);
                assert_eq!(t.parse::<f32>().map(f32::to_bits), Ok(f.to_bits()), "{t}");
            }
            // Arrays of random text elements (quotes, braces, commas,
            // backslashes, spaces, NULL spellings, astral characters).
            let pieces = [
                "a", "\\", "\"", "{", "}", ",", " ", "NULL", "null", "", "😀", "\u{feff}", "x",
            ];
            let n = next() % 5;
            let elements: Vec<Option<String>> = (0..n)
                .map(|_| {
                    if next() % 6 == 0 {
                        None
                    } else {
                        let k = next() % 4;
                        Some(
                            (0..k)
                                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                                .collect(),
                        )
                    }
                })
                .collect();
            let text = format_array(&elements);
            assert_eq!(parse_array(&text), Ok(elements), "{text}");
        }
    }

    #[test]
    fn uuids_floats_and_arrays() {
        let u = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        assert_eq!(format_uuid(&parse_uuid(u).unwrap()), u);
        assert!(parse_uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11").is_err());
        for (x, single, s) in [
            (1e100, false, "1e+100"),
            (1.5e-5, false, "1.5e-05"),
            (123456789012345.0, false, "123456789012345"),
            (1234567890123456.0, false, "1.234567890123456e+15"),
            (0.0001, false, "0.0001"),
            (100.0, false, "100"),
            (-0.0, false, "-0"),
            (0.1, false, "0.1"),
            (0.1f32 as f64, true, "0.1"),
            (1e6, true, "1e+06"),
            (123456.0, true, "123456"),
        ] {
            assert_eq!(format_float(x, single), s, "{x}");
        }
        let a = vec![
            None,
            Some("".to_string()),
            Some("null".to_string()),
            Some("a \"b\"\\c".to_string()),
            Some("x,y{}".to_string()),
            Some("plain".to_string()),
        ];
        let t = format_array(&a);
        assert_eq!(t, r#"{NULL,"","null","a \"b\"\\c","x,y{}",plain}"#);
        assert_eq!(parse_array(&t).unwrap(), a);
        assert_eq!(parse_array("{}").unwrap(), Vec::<Option<String>>::new());
        assert!(parse_array("{{1,2},{3,4}}").is_err());
        assert!(parse_array("[0:1]={1,2}").is_err());
    }
}
