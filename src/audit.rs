//! One audit event as `history`, `show` and the web page print it: the facts the event
//! recorded when it happened (its detail), never the key's state now.
//!
//! A decision names its file, its documents (with the business system's reference a resend
//! learned then) and its reason; a delivery is an event of its own (`delivered`: destination,
//! status, reference), so a rejection decided before a corrected resend was delivered never
//! reads as delivered. Events recorded by earlier versions are read the same way: they carry
//! no delivery, and none is added from today's state.

use serde_json::{Map, Value};

use crate::registry::{Event, EventKind};
use crate::text::printable;

/// How many documents and references one line names.
const NAMED: usize = 3;

/// The event's detail as a JSON object (empty for a note recorded without one).
fn detail(e: &Event) -> Map<String, Value> {
    match serde_json::from_str(&e.detail) {
        Ok(Value::Object(o)) => o,
        _ => Map::new(),
    }
}

/// The business system's references the event itself records, each once, in order: a
/// delivery's or a confirmation's own, or those its documents carried when it was decided
/// (a resend's duplicates).
fn refs(detail: &Map<String, Value>) -> Vec<&str> {
    let own = detail.get("result_ref").and_then(Value::as_str);
    let of_documents = detail
        .get("documents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| d["result_ref"].as_str());
    let mut found: Vec<&str> = Vec::new();
    for r in own.into_iter().chain(of_documents) {
        if !found.contains(&r) {
            found.push(r);
        }
    }
    found
}

/// The event as one JSON object (a line of `history --json`): its detail, with `time`,
/// `event`, `key` and, when the event itself names exactly one reference, `result_ref`.
pub fn json(e: &Event, time: String) -> Value {
    let mut o = detail(e);
    if !o.contains_key("result_ref") {
        if let [one] = refs(&o).as_slice() {
            let one = Value::from(*one);
            o.insert("result_ref".into(), one);
        }
    }
    o.insert("time".into(), time.into());
    o.insert("event".into(), e.event.as_str().into());
    o.insert("key".into(), e.key.clone().into());
    Value::Object(o)
}

/// What the event records, as the text of `history` prints it after the time and the key:
/// what happened (the disposition, or the note's kind), the file and where it went, the
/// documents, a delivery's destination and status, references, and the reason.
pub fn line(e: &Event) -> String {
    let detail = detail(e);
    let field = |name: &str| detail.get(name).and_then(Value::as_str).map(printable);
    let what = e.disposition.map_or(e.event.as_str(), |d| d.as_str());
    let mut line = format!("{what:<11} ");
    if e.event.as_str() != what {
        line.push_str(&format!(" ({})", e.event));
    }
    if detail.get("usage").and_then(Value::as_str) == Some("T") {
        line.push_str(" test interchange");
    }
    if let Some(file) = field("file") {
        line.push_str(&format!(" {file}"));
    }
    if let Some(placed) = field("placed") {
        line.push_str(&format!(" -> {placed}"));
    }
    line.push_str(&documents_of(&detail));
    let delivery = matches!(e.event, EventKind::DeliveryAttempt | EventKind::Delivered);
    if delivery {
        // ` to erp: 503, retrying (attempt 2, 12 ms)`; a delivery says only its status.
        let state = field("state")
            .filter(|_| e.event != EventKind::Delivered)
            .map(|s| format!(", {s}"))
            .unwrap_or_default();
        line.push_str(&format!(
            " to {}: {}{state} (attempt {}, {} ms)",
            field("destination").unwrap_or_default(),
            field("status").unwrap_or_default(),
            detail.get("attempt").unwrap_or(&Value::Null),
            detail.get("duration_ms").unwrap_or(&Value::Null),
        ));
    }
    // A decision's references are its documents' (named with them); another event's are its own.
    if e.disposition.is_none() {
        if let Some(r) = field("result_ref") {
            line.push_str(&format!(" ref {r}"));
        }
        if let Some(before) = field("before").filter(|_| e.event == EventKind::Confirmed) {
            line.push_str(&format!(" (it was {before})"));
        }
    }
    if let Some(reason) = field("reason") {
        let code = field("reason_code")
            .map(|c| format!("{c} "))
            .unwrap_or_default();
        line.push_str(&format!(": {code}{reason}"));
    } else if let Some(error) = field("error").filter(|_| delivery) {
        line.push_str(&format!(": {error}"));
    }
    line
}

/// A decision's documents in a few words (` documents: KEY new, KEY duplicate ref SO-1`),
/// as they were decided; or the document a note is about. At most [`NAMED`] are named, and
/// the rest counted (all of them: the record lists the first hundred and their number).
fn documents_of(detail: &Map<String, Value>) -> String {
    if let Some(key) = detail.get("document").and_then(Value::as_str) {
        return format!(" document {}", printable(key));
    }
    let Some(docs) = detail
        .get("documents")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
    else {
        return String::new();
    };
    let mut named: Vec<String> = docs
        .iter()
        .take(NAMED)
        .map(|d| {
            let reference = d["result_ref"]
                .as_str()
                .map(|r| format!(" ref {}", printable(r)))
                .unwrap_or_default();
            let nowhere = d["undelivered"]
                .as_str()
                .map(|why| format!(" (delivered nowhere: {})", printable(why)))
                .unwrap_or_default();
            format!(
                "{} {}{reference}{nowhere}",
                printable(d["key"].as_str().unwrap_or("-")),
                d["disposition"].as_str().unwrap_or("-")
            )
        })
        .collect();
    let total = detail
        .get("documents_total")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(docs.len());
    if total > named.len() {
        named.push(format!("{} more", total - named.len()));
    }
    format!(" documents: {}", named.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disposition::Disposition;

    fn event(kind: EventKind, disposition: Option<Disposition>, detail: Value) -> Event {
        Event {
            at_ms: 0,
            event: kind,
            key: Some("ZZ:ACME:000001010".into()),
            partner: Some("ZZ:ACME".into()),
            control_number: Some("000001010".into()),
            disposition,
            detail: detail.to_string(),
        }
    }

    /// A rejection, an acceptance, a conflict and a delivery each print what they recorded:
    /// a delivery only on its own line.
    #[test]
    fn each_event_prints_its_own_facts() {
        let rejected = event(
            EventKind::Rejected,
            Some(Disposition::Rejected),
            serde_json::json!({"file": "a.x12", "reason_code": "006", "reason": "bad", "acks": ["outbox/a.ta1"]}),
        );
        let line_of = line(&rejected);
        assert_eq!(line_of, "rejected     a.x12: 006 bad");
        assert!(json(&rejected, "t".into()).get("result_ref").is_none());
        let conflict = event(
            EventKind::Conflict,
            Some(Disposition::Conflict),
            serde_json::json!({"file": "c.x12", "reason_code": "025", "reason": "other content"}),
        );
        assert!(
            !line(&conflict).contains("delivered"),
            "{}",
            line(&conflict)
        );
        let resend = event(
            EventKind::Accepted,
            Some(Disposition::Accepted),
            serde_json::json!({"file": "b.x12", "documents": [
                {"key": "K1", "disposition": "duplicate", "result_ref": "SO-1"},
                {"key": "K2", "disposition": "new", "result_ref": null},
            ]}),
        );
        assert_eq!(
            line(&resend),
            "accepted     b.x12 documents: K1 duplicate ref SO-1, K2 new"
        );
        assert_eq!(json(&resend, "t".into())["result_ref"], "SO-1");
        let delivered = event(
            EventKind::Delivered,
            None,
            serde_json::json!({"document": "K2", "destination": "erp", "attempt": 2,
                "status": "200", "duration_ms": 4, "state": "delivered", "result_ref": "SO-2"}),
        );
        assert_eq!(
            line(&delivered),
            "delivered    document K2 to erp: 200 (attempt 2, 4 ms) ref SO-2"
        );
        let v = json(&delivered, "t".into());
        assert_eq!(
            (
                &v["event"],
                &v["destination"],
                &v["status"],
                &v["result_ref"]
            ),
            (
                &Value::from("delivered"),
                &Value::from("erp"),
                &Value::from("200"),
                &Value::from("SO-2")
            )
        );
        let failed = event(
            EventKind::DeliveryAttempt,
            None,
            serde_json::json!({"document": "K2", "destination": "erp", "attempt": 1,
                "status": "503", "duration_ms": 9, "state": "retrying", "error": "busy", "result_ref": null}),
        );
        assert_eq!(
            line(&failed),
            "delivery_attempt  document K2 to erp: 503, retrying (attempt 1, 9 ms): busy"
        );
    }

    /// An interchange of many documents: its record lists the first hundred and their
    /// number, and the line counts all the others.
    #[test]
    fn a_decision_counts_the_documents_it_does_not_name() {
        let docs: Vec<Value> = (0..100)
            .map(|i| serde_json::json!({"key": format!("K{i}"), "disposition": "new"}))
            .collect();
        let e = event(
            EventKind::Accepted,
            Some(Disposition::Accepted),
            serde_json::json!({"documents": docs, "documents_total": 1003}),
        );
        assert!(
            line(&e).ends_with("K0 new, K1 new, K2 new, 1000 more"),
            "{}",
            line(&e)
        );
    }
}
