//! Registry times (milliseconds since the epoch) as operators read them: RFC 3339, always
//! with milliseconds, so that a time on a whole second has the same shape as any other (a
//! shape that varied made outputs of the same work differ one time in a thousand).

use chrono::SecondsFormat;

/// `ms` in UTC: `2026-12-04T09:35:02.000+00:00`; empty when out of chrono's range.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, false))
        .unwrap_or_default()
}

/// `ms` in the host's local time, as `show`, `claims` and the log print it.
pub fn local_rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .to_rfc3339_opts(SecondsFormat::Millis, false)
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_second_keeps_its_milliseconds() {
        assert_eq!(rfc3339(1_700_000_000_000), "2023-11-14T22:13:20.000+00:00");
        assert_eq!(rfc3339(1_700_000_000_007), "2023-11-14T22:13:20.007+00:00");
        let local = local_rfc3339(1_700_000_000_000);
        assert_eq!(local.len(), rfc3339(0).len(), "{local}");
        assert!(local.contains(":20.000"), "{local}");
        assert_eq!(rfc3339(i64::MAX), "");
    }
}
