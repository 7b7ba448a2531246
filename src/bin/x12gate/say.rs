//! Lines for the operator on stderr (errors, warnings, summaries), in the form the logs take.

/// Whether stderr carries JSON lines (`--log-format json`): then the lines the binary
/// itself prints (errors, summaries) are JSON objects too, shaped like the log lines.
pub static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A line for the operator on stderr, at `level` (`ERROR`, `WARN`, `INFO`): plain text, or
/// one JSON object with `--log-format json`, so that a JSON stream stays JSON.
macro_rules! say {
    ($level:expr, $($arg:tt)*) => {
        $crate::say::say_line($level, &format!($($arg)*))
    };
}

pub fn say_line(level: &str, message: &str) {
    // Messages quote input (a sender id, a segment): escaped, and cut to a sane length.
    let message = x12gate::text::printable(&x12gate::text::shortened(message, 4096)).into_owned();
    let message = message.as_str();
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        let line = serde_json::json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": level,
            "fields": { "message": message },
            "target": "x12gate",
        });
        eprintln!("{line}");
    } else {
        eprintln!("{message}");
    }
}
