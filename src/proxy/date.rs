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

/// The day names of RFC 9110 §5.6.7 (`day-name`, case-sensitive).
const DAY_NAMES: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
/// The long day names of the obsolete RFC 850 form (`day-name-l`).
const DAY_NAMES_LONG: [&[u8]; 7] = [
    b"Monday",
    b"Tuesday",
    b"Wednesday",
    b"Thursday",
    b"Friday",
    b"Saturday",
    b"Sunday",
];

/// `month` (case-sensitive: `%s"Jan"`), 1 to 12.
fn month(b: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| &m[..] == b)
        .map(|i| i as u32 + 1)
}

/// Exactly `n` digits.
fn digits(b: &[u8], n: usize) -> Option<u32> {
    if b.len() != n || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |v, d| v * 10 + u32::from(d - b'0')))
}

/// `time-of-day = hour ":" minute ":" second`, two digits each; a leap
/// second (60) is allowed.
fn time_of_day(b: &[u8]) -> Option<(u32, u32, u32)> {
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (
        digits(&b[0..2], 2)?,
        digits(&b[3..5], 2)?,
        digits(&b[6..8], 2)?,
    );
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some((h, m, s))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn to_secs(y: i64, mo: u32, d: u32, (h, mi, s): (u32, u32, u32)) -> Option<u64> {
    if d == 0 || d > days_in_month(y, mo) || y < 1970 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    u64::try_from(secs).ok()
}

/// `IMF-fixdate = day-name "," SP date1 SP time-of-day SP GMT`, with
/// `date1 = day SP month SP year` (2, 3 and 4 characters): 29 bytes,
/// single spaces, no dashes.
fn imf_fixdate(v: &[u8]) -> Option<u64> {
    if v.len() != 29
        || !DAY_NAMES.contains(&&v[0..3])
        || &v[3..5] != b", "
        || v[7] != b' '
        || v[11] != b' '
        || v[16] != b' '
        || v[25] != b' '
        || &v[26..29] != b"GMT"
    {
        return None;
    }
    let d = digits(&v[5..7], 2)?;
    let m = month(&v[8..11])?;
    let y = digits(&v[12..16], 4)?;
    to_secs(i64::from(y), m, d, time_of_day(&v[17..25])?)
}

/// `rfc850-date = day-name-l "," SP date2 SP time-of-day SP GMT`, with
/// `date2 = day "-" month "-" 2DIGIT`. A two-digit year more than 50 years
/// after `now_year` is the most recent past year with those digits
/// (RFC 9110 §5.6.7).
fn rfc850_date(v: &[u8], now_year: i64) -> Option<u64> {
    let comma = v.iter().position(|&b| b == b',')?;
    if !DAY_NAMES_LONG.contains(&&v[..comma]) {
        return None;
    }
    let rest = v.get(comma..)?;
    // ", DD-Mon-YY HH:MM:SS GMT"
    if rest.len() != 24
        || &rest[0..2] != b", "
        || rest[4] != b'-'
        || rest[8] != b'-'
        || rest[11] != b' '
        || rest[20] != b' '
        || &rest[21..24] != b"GMT"
    {
        return None;
    }
    let d = digits(&rest[2..4], 2)?;
    let m = month(&rest[5..8])?;
    let yy = i64::from(digits(&rest[9..11], 2)?);
    let century = now_year - now_year.rem_euclid(100);
    let mut y = century + yy;
    if y > now_year + 50 {
        y -= 100;
    }
    to_secs(y, m, d, time_of_day(&rest[12..20])?)
}

/// `asctime-date = day-name SP date3 SP time-of-day SP year`, with
/// `date3 = month SP ( 2DIGIT / ( SP DIGIT ) )`: 24 bytes.
fn asctime_date(v: &[u8]) -> Option<u64> {
    if v.len() != 24
        || !DAY_NAMES.contains(&&v[0..3])
        || v[3] != b' '
        || v[7] != b' '
        || v[10] != b' '
        || v[19] != b' '
    {
        return None;
    }
    let m = month(&v[4..7])?;
    let d = match (v[8], v[9]) {
        (b' ', d) if d.is_ascii_digit() => u32::from(d - b'0'),
        _ => digits(&v[8..10], 2)?,
    };
    let y = digits(&v[20..24], 4)?;
    to_secs(i64::from(y), m, d, time_of_day(&v[11..19])?)
}

/// The year of `secs` since the epoch.
fn year_of(secs: u64) -> i64 {
    civil_from_days((secs / 86_400) as i64).0
}

/// Seconds since the epoch of an HTTP date (RFC 9110 §5.6.7): exactly an
/// IMF-fixdate, or one of the obsolete forms a recipient still accepts
/// (RFC 850, asctime), after trimming surrounding whitespace; `None` for
/// anything else — double spaces, dashes in an IMF-fixdate, a one-digit
/// hour, other case, other zones — and for dates before 1970. Callers treat
/// an invalid `Expires` as already expired (RFC 9111 §5.3). RFC 850's
/// two-digit years are read as of `now_secs`.
pub fn parse_http_date_at(v: &[u8], now_secs: u64) -> Option<u64> {
    let v = crate::proxy::http::trim_ows(v);
    imf_fixdate(v)
        .or_else(|| rfc850_date(v, year_of(now_secs)))
        .or_else(|| asctime_date(v))
}

/// [`parse_http_date_at`] as of 2000 (RFC 850's `70`–`99` are 1970–1999,
/// `00`–`49` 2000–2049): for comparing two dates, where no clock is at hand.
pub fn parse_http_date(v: &[u8]) -> Option<u64> {
    const Y2000_SECS: u64 = 946_684_800;
    parse_http_date_at(v, Y2000_SECS)
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
        // The RFC's own examples.
        let want = Some(784_111_777);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), want);
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), want);
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), want);
        assert_eq!(parse_http_date(b"Sun Nov 06 08:49:37 1994"), want);
        // Surrounding whitespace is not part of the value.
        assert_eq!(parse_http_date(b" Sun, 06 Nov 1994 08:49:37 GMT\t"), want);
        assert_eq!(parse_http_date(b"0"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Foo 1994 08:49:37 GMT"), None);
    }

    #[test]
    fn rfc9110_5_6_7_invalid_forms_are_not_dates() {
        // The forms that issue 26 names, then other departures from the grammar.
        for bad in [
            "Thu, 18  Aug  2050 02:01:18 GMT", // double spaces
            "Thu, 18-Aug-2050 02:01:18 GMT",   // dashes in an IMF-fixdate
            "Thu, 18 Aug 2050 2:01:18 GMT",    // one-digit hour
            "Thu, 18 Aug 2050 02.01.18 GMT",   // periods
            "Thu, 18 Aug 2050 02:01:18 UTC",   // another zone
            "Thu, 18 Aug 50 02:01:18 GMT",     // two-digit year in an IMF-fixdate
            "Thu 18 Aug 2050 02:01:18 GMT",    // no comma
            "THU, 18 Aug 2050 02:01:18 GMT",   // case (day-name is %s"Thu")
            "Thu, 18 AUG 2050 02:01:18 GMT",   // case (month)
            "Thu, 18 Aug 2050 02:01:18 gMT",   // case (GMT)
            "Thu, 8 Aug 2050 02:01:18 GMT",    // one-digit day
            "Thu, 31 Feb 2050 02:01:18 GMT",   // no such day
            "Thu, 18 Aug 2050 02:01:18 GMT x", // trailing text
            "Thu, 18 Aug 2050 02:01:18",       // no zone
            "Thursday, 18 Aug 2050 02:01:18 GMT",
            "Thu, 18-Aug-50 02:01:18 GMT", // RFC 850 with a short day name
            "Thursday, 18-Aug-2050 02:01:18 GMT",
            "Thu Aug 18 2:01:18 2050",       // asctime, one-digit hour
            "Thu Aug 18 02:01:18 50",        // asctime, two-digit year
            "Thu Aug  18 02:01:18 2050",     // asctime, double space before 2 digits
            "Wed, 31 Dec 1969 23:59:59 GMT", // before the epoch
            "Thu, 18 Aug 2050 02:01:18 GMT, Thu, 18 Aug 2050 02:01:18 GMT",
            "",
        ] {
            assert_eq!(parse_http_date(bad.as_bytes()), None, "{bad:?}");
        }
        // Leap years.
        assert!(parse_http_date(b"Thu, 29 Feb 2024 00:00:00 GMT").is_some());
        assert_eq!(parse_http_date(b"Sun, 29 Feb 2100 00:00:00 GMT"), None);
        // A leap second is a time-of-day.
        assert!(parse_http_date(b"Sat, 31 Dec 2016 23:59:60 GMT").is_some());
    }

    #[test]
    fn rfc9110_5_6_7_rfc850_years_more_than_50_years_ahead_are_in_the_past() {
        let y2026 = 1_767_225_600; // 2026-01-01
        let at = |v: &str| parse_http_date_at(v.as_bytes(), y2026).map(year_of);
        assert_eq!(at("Sunday, 06-Nov-94 08:49:37 GMT"), Some(1994));
        assert_eq!(at("Friday, 06-Nov-76 08:49:37 GMT"), Some(2076));
        assert_eq!(at("Monday, 06-Nov-77 08:49:37 GMT"), Some(1977));
        assert_eq!(at("Thursday, 18-Aug-50 02:01:18 GMT"), Some(2050));
    }

    proptest::proptest! {
        #[test]
        fn rfc9110_5_6_7_every_form_of_a_time_reads_back_the_same(secs in 0u64..4_102_444_800) {
            let mut imf = Vec::new();
            write_http_date(&mut imf, secs);
            proptest::prop_assert_eq!(parse_http_date(&imf), Some(secs));
            // The same instant in the two obsolete forms.
            let t = String::from_utf8(imf).unwrap();
            let (wd, rest) = t.split_once(", ").unwrap();
            let f: Vec<&str> = rest.split(' ').collect();
            let (d, m, y, hms) = (f[0], f[1], f[2], f[3]);
            let long = DAY_NAMES_LONG[DAY_NAMES.iter().position(|n| *n == wd.as_bytes()).unwrap()];
            let rfc850 = format!("{}, {d}-{m}-{} {hms} GMT", String::from_utf8_lossy(long), &y[2..]);
            let year: i64 = y.parse().unwrap();
            // Read as of the same year: the two digits name it.
            let now = days_from_civil(year, 6, 1) as u64 * 86_400;
            proptest::prop_assert_eq!(parse_http_date_at(rfc850.as_bytes(), now), Some(secs));
            let day: u32 = d.parse().unwrap();
            let asctime = format!("{wd} {m} {day:>2} {hms} {y}");
            proptest::prop_assert_eq!(parse_http_date(asctime.as_bytes()), Some(secs));
        }

        #[test]
        fn rfc9110_5_6_7_arbitrary_bytes_never_panic(v in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = parse_http_date(&v);
        }
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
