//! The gateway's clock and its times as operators read them.
//!
//! Every decision that depends on time (a claim's or a delivery's lease, a retry's backoff, a
//! circuit's cool-down, a retention window, a dead owner's folder) reads [`now_ms`], never
//! the wall clock directly, so that tests can drive it instead of sleeping:
//! - a unit test shifts its own thread's clock ([`shift_this_thread`]): hours of retries and
//!   cool-downs simulated in a moment, without touching the tests beside it;
//! - a test that runs the binary as a process (built with the `failpoints` feature, the
//!   test-only build) names a file in `X12GATE_TEST_CLOCK` holding how many milliseconds that
//!   process's clock runs ahead of the wall, and moves it by rewriting the file while the
//!   process runs. Without the feature the variable is not even read.
//!
//! What waits on real events stays on the wall clock: a file settling in the inbox (its
//! mtime is the file system's), a request's timeout, a sleep between polls.
//!
//! Registry times are milliseconds since the epoch, printed as RFC 3339, always with
//! milliseconds, so that a time on a whole second has the same shape as any other (a shape
//! that varied made outputs of the same work differ one time in a thousand).

use std::time::{Duration, SystemTime};

use chrono::SecondsFormat;

/// Milliseconds since the Unix epoch by the gateway's clock (the registry's times).
pub fn now_ms() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    #[cfg(feature = "failpoints")]
    let now = now.saturating_add(driven::ahead_ms());
    #[cfg(test)]
    let now = now.saturating_add(SHIFT_MS.with(std::cell::Cell::get));
    now
}

/// [`now_ms`] as a `SystemTime`, to compare with a file's modification time.
pub fn now() -> SystemTime {
    let ms = now_ms();
    let since = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + since
    } else {
        SystemTime::UNIX_EPOCH - since
    }
}

#[cfg(test)]
thread_local! {
    /// How far this thread's clock runs ahead of the wall.
    static SHIFT_MS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// Moves this thread's clock `ms` ahead of the wall (unit tests only; other threads keep
/// theirs).
#[cfg(test)]
pub(crate) fn shift_this_thread(ms: i64) {
    SHIFT_MS.with(|c| c.set(ms));
}

/// The clock of a process under test, driven through a file (see the module note).
#[cfg(feature = "failpoints")]
mod driven {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    /// The variable naming the file.
    const VAR: &str = "X12GATE_TEST_CLOCK";

    /// How far the file says the clock runs ahead: 0 without the variable, and while the
    /// file is missing or not a whole number (a test rewrites it by renaming a new file over
    /// it, so a reader never sees half of one).
    pub fn ahead_ms() -> i64 {
        static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
        FILE.get_or_init(|| std::env::var_os(VAR).map(PathBuf::from))
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }
}

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

    #[test]
    fn a_thread_s_shift_moves_its_clock_only() {
        let wall = chrono::Utc::now().timestamp_millis();
        shift_this_thread(3_600_000);
        assert!(now_ms() >= wall + 3_600_000);
        let other = std::thread::spawn(now_ms).join().unwrap_or(i64::MAX);
        assert!(other < wall + 3_600_000, "{other}");
        let file_time = now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        assert!(file_time.as_millis() >= u128::try_from(wall + 3_600_000).unwrap_or(0));
        shift_this_thread(0);
    }
}
