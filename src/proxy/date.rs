//! HTTP dates (RFC 9110 §5.6.7): IMF-fixdate written, all three forms read.

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn month(b: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(b))
        .map(|i| i as u32 + 1)
}

fn num(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 4 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
}

fn hms(b: &[u8]) -> Option<(u32, u32, u32)> {
    let mut it = b.split(|&c| c == b':');
    let (h, m, s) = (num(it.next()?)?, num(it.next()?)?, num(it.next()?)?);
    if it.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some((h, m, s))
}

fn to_secs(y: i64, mo: u32, d: u32, (h, mi, s): (u32, u32, u32)) -> Option<u64> {
    if !(1..=31).contains(&d) || y < 1970 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    u64::try_from(secs).ok()
}

/// Seconds since the epoch of an HTTP date in any of the three forms of RFC 9110 §5.6.7;
/// `None` if it is not one (callers treat an invalid `Expires` as already expired).
pub fn parse_http_date(v: &[u8]) -> Option<u64> {
    let v = crate::proxy::http::trim_ows(v);
    let words: Vec<&[u8]> = v.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    match words.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wd, d, m, y, t, gmt] if wd.ends_with(b",") && gmt == b"GMT" => {
            let y = num(y)?;
            if y < 1000 {
                return None;
            }
            to_secs(i64::from(y), month(m)?, num(d)?, hms(t)?)
        }
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        [wd, dmy, t, gmt] if wd.ends_with(b",") && gmt == b"GMT" => {
            let mut p = dmy.split(|&b| b == b'-');
            let (d, m, y) = (num(p.next()?)?, month(p.next()?)?, num(p.next()?)?);
            if p.next().is_some() {
                return None;
            }
            // Two-digit years: RFC 9110 §5.6.7, more than 50 years ahead is the past.
            let y = if y < 100 {
                if y >= 70 {
                    1900 + y
                } else {
                    2000 + y
                }
            } else {
                y
            };
            to_secs(i64::from(y), m, d, hms(t)?)
        }
        // asctime: Sun Nov  6 08:49:37 1994
        [_, m, d, t, y] => to_secs(i64::from(num(y)?), month(m)?, num(d)?, hms(t)?),
        _ => None,
    }
}

/// Appends the IMF-fixdate of `secs` (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn write_http_date(out: &mut Vec<u8>, secs: u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let wd = DAYS[(days % 7) as usize];
    let mon = MONTHS[(m - 1) as usize];
    let text = format!(
        "{wd}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        core::str::from_utf8(mon).unwrap_or("Jan"),
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9110_5_6_7_all_three_date_forms_are_read() {
        let want = Some(784_111_777);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), want);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), want);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), want);
        assert_eq!(parse_http_date(b"0"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Foo 1994 08:49:37 GMT"), None);
    }

    #[test]
    fn rfc9110_5_6_7_imf_fixdate_round_trips() {
        let mut out = Vec::new();
        write_http_date(&mut out, 784_111_777);
        assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        for secs in [0u64, 86_399, 951_782_400, 1_700_000_000, 4_102_444_800] {
            let mut out = Vec::new();
            write_http_date(&mut out, secs);
            assert_eq!(
                parse_http_date(&out),
                Some(secs),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}
