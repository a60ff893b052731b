//! Console text: one point per line, for a person watching a terminal:
//!
//! ```text
//! 2025-11-22T08:30:00Z web.api.latency.pct99{dc=x,host=a} 12.5
//! ```

use sonde_aggregate::OutPoint;

use crate::write_number;

/// Formats unix seconds as an RFC 3339 UTC time (`2025-11-22T08:30:00Z`).
pub fn write_time(out: &mut Vec<u8>, unix: i64) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid for any i64 day.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let s = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    out.extend_from_slice(s.as_bytes());
}

/// Appends one line per point to `out`.
pub fn encode<'a>(points: impl IntoIterator<Item = OutPoint<'a>>, out: &mut Vec<u8>) {
    let mut name = String::new();
    for p in points {
        write_time(out, p.timestamp);
        out.push(b' ');
        name.clear();
        p.write_name(&mut name);
        out.extend_from_slice(name.as_bytes());
        let mut first = true;
        p.for_each_tag(|k, v| {
            out.push(if first { b'{' } else { b',' });
            first = false;
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
        });
        if !first {
            out.push(b'}');
        }
        out.push(b' ');
        write_number(out, p.value);
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::series;
    use sonde_aggregate::Suffix;

    #[test]
    fn a_point_reads_as_time_name_tags_value() {
        let p = OutPoint {
            series: series("web.api.latency", &[("dc", "x"), ("host", "a")]),
            suffix: Suffix::Pct99,
            le: None,
            value: 12.5,
            timestamp: 1_763_800_200,
            monotonic: false,
        };
        let mut out = Vec::new();
        encode([p], &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2025-11-22T08:30:00Z web.api.latency.pct99{dc=x,host=a} 12.5\n"
        );
    }

    #[test]
    fn times_before_and_after_leap_days_are_right() {
        for (unix, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (-1, "1969-12-31T23:59:59Z"),
        ] {
            let mut out = Vec::new();
            write_time(&mut out, unix);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
