//! HTTP dates: [`format_http_date`] and [`parse_http_date`], the RFC 7231 IMF-fixdate
//! (`Sun, 06 Nov 1994 08:49:37 GMT`) with the obsolete RFC 850 and asctime forms also read.

/// The length of an IMF-fixdate.
pub const HTTP_DATE_LEN: usize = 29;

const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month 1..=12, day 1..=31) to days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch as an IMF-fixdate. Years past 9999 are written as 9999-12-31
/// 23:59:59 (the format has four digits). See RFC 9110 §5.6.7.
pub fn format_http_date(secs: u64) -> [u8; HTTP_DATE_LEN] {
    const MAX: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let secs = secs.min(MAX);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    two(&mut out[5..7], d);
    out[8..11].copy_from_slice(MONTHS[(m - 1) as usize]);
    let y = y as u32;
    two(&mut out[12..14], y / 100);
    two(&mut out[14..16], y % 100);
    two(&mut out[17..19], (rem / 3600) as u32);
    two(&mut out[20..22], (rem / 60 % 60) as u32);
    two(&mut out[23..25], (rem % 60) as u32);
    out
}

/// The length of a common log format timestamp (`23/Nov/2026:17:00:00 +0000`).
pub const CLF_DATE_LEN: usize = 26;

/// Seconds since the epoch as the timestamp of a common log format line, in UTC
/// (`23/Nov/2026:17:00:00 +0000`, what Apache's `%t` and nginx's `$time_local` write, without
/// the brackets). Years past 9999 are written as 9999-12-31 23:59:59.
pub fn format_clf_date(secs: u64) -> [u8; CLF_DATE_LEN] {
    let http = format_http_date(secs); // Thu, 01 Jan 1970 00:00:00 GMT
    let mut out = *b"01/Jan/1970:00:00:00 +0000";
    out[0..2].copy_from_slice(&http[5..7]);
    out[3..6].copy_from_slice(&http[8..11]);
    out[7..11].copy_from_slice(&http[12..16]);
    out[12..20].copy_from_slice(&http[17..25]);
    out
}

fn two(out: &mut [u8], n: u32) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

/// An HTTP date to seconds since the epoch; `None` for anything else (or a date before
/// 1970). Accepts IMF-fixdate, RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
/// (`Sun Nov  6 08:49:37 1994`). See RFC 9110 §5.6.7.
pub fn parse_http_date(s: &[u8]) -> Option<u64> {
    let s = s.trim_ascii();
    let (y, m, d, time) = if s.len() == HTTP_DATE_LEN && s[3] == b',' {
        // Sun, 06 Nov 1994 08:49:37 GMT
        if s[4] != b' ' || s[7] != b' ' || s[11] != b' ' || s[16] != b' ' || &s[25..] != b" GMT" {
            return None;
        }
        (
            num(&s[12..16])?,
            month(&s[8..11])?,
            num(&s[5..7])?,
            &s[17..25],
        )
    } else if let Some(comma) = s.iter().position(|&b| b == b',') {
        // Sunday, 06-Nov-94 08:49:37 GMT
        let r = &s[comma + 1..];
        if r.len() != 23 || r[0] != b' ' || r[3] != b'-' || r[7] != b'-' || r[10] != b' ' {
            return None;
        }
        if &r[19..] != b" GMT" {
            return None;
        }
        let yy = num(&r[8..10])?;
        // RFC 9110: a two-digit year more than 50 years ahead is in the past century.
        let y = if yy < 70 { 2000 + yy } else { 1900 + yy };
        (y, month(&r[4..7])?, num(&r[1..3])?, &r[11..19])
    } else if s.len() == 24 {
        // Sun Nov  6 08:49:37 1994
        if s[3] != b' ' || s[7] != b' ' || s[10] != b' ' || s[19] != b' ' {
            return None;
        }
        let day = if s[8] == b' ' { &s[9..10] } else { &s[8..10] };
        (num(&s[20..24])?, month(&s[4..7])?, num(day)?, &s[11..19])
    } else {
        return None;
    };
    if time[2] != b':' || time[5] != b':' {
        return None;
    }
    let (hh, mm, ss) = (num(&time[..2])?, num(&time[3..5])?, num(&time[6..8])?);
    if !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 || y < 1970 {
        return None;
    }
    let days = days_from_civil(i64::from(y), m, d);
    let secs = days * 86_400 + i64::from(hh * 3600 + mm * 60 + ss);
    u64::try_from(secs).ok()
}

fn num(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &b| n * 10 + u32::from(b - b'0')))
}

fn month(s: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| &m[..] == s)
        .map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_timestamps() {
        assert_eq!(&format_clf_date(0), b"01/Jan/1970:00:00:00 +0000");
        assert_eq!(&format_clf_date(784_111_777), b"06/Nov/1994:08:49:37 +0000");
        assert_eq!(
            &format_clf_date(1_795_453_200),
            b"23/Nov/2026:17:00:00 +0000"
        );
    }

    #[test]
    fn known_dates() {
        assert_eq!(&format_http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            &format_http_date(784_111_777),
            b"Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            &format_http_date(951_782_400),
            b"Tue, 29 Feb 2000 00:00:00 GMT"
        );
        assert_eq!(
            parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(b"Sun Nov  6 08:49:37 1994"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 UTC"), None);
        assert_eq!(parse_http_date(b"garbage"), None);
        assert_eq!(parse_http_date(b""), None);
    }

    #[test]
    fn round_trip_every_day_for_sixty_years() {
        let mut t = 0u64;
        while t < 60 * 366 * 86_400 {
            assert_eq!(parse_http_date(&format_http_date(t)), Some(t));
            t += 86_400 + 3_661;
        }
    }
}
