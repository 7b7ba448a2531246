//! One attempt at one delivery, by the destination's kind: a POST, a program, a copy into a
//! folder. What came back is judged here ([`Attempted`]); what follows from it (retry, dead
//! letter, the circuit) is the registry's.

use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::{Destination, DestinationKind, HeaderValue};
use crate::registry::{Attempted, Claimed, KeptBody, PROTOCOL_ERROR};

/// The most of an answer's body (or a program's output) that is kept: a reference is short,
/// and a destination that answers with a film must not fill memory.
const BODY_LIMIT: u64 = 64 * 1024;

/// The most of an answer's body that is read to check it is whole (the rest of it, past
/// [`BODY_LIMIT`], is read and dropped): an answer longer than this is not one we can vouch
/// for, and its document is tried again.
const BODY_CHECKED: u64 = 16 * 1024 * 1024;

/// A program's exit status that means "this document is refused" (`EX_DATAERR`): dead at
/// once, as a 4xx is. Any other failure is tried again.
pub const COMMAND_REFUSED: i32 = 65;

/// The environment variables a destination's headers need that are not set.
pub fn missing_environment(d: &Destination) -> Vec<String> {
    match &d.kind {
        DestinationKind::Http { headers, .. } => headers
            .iter()
            .filter_map(|(_, v)| match v {
                HeaderValue::Env(var) if std::env::var_os(var).is_none() => Some(var.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Sends `c`, whose JSON the registry keeps as `body`, to `d` once (a folder destination
/// is written a batch at a time, by [`folder`]).
pub fn send(agent: &ureq::Agent, d: &Destination, c: &Claimed, body: KeptBody) -> Attempted {
    if let Some(refused) = mixed(d, c) {
        return refused;
    }
    match &d.kind {
        DestinationKind::Http { url, headers } => http(agent, d, url, headers, c, body),
        DestinationKind::Command { argv } => command(d, argv, c, body),
        DestinationKind::Folder { .. } => Attempted::Unsent {
            status: "folder".into(),
            error: "a folder destination is written a batch at a time".into(),
            permanent: false,
        },
    }
}

/// A row whose document's usage is not its destination's (the destination's `usage`
/// changed in `partners.toml` after the row was queued): never sent, dead at once, since
/// test and production never mix. `out/` takes both, each into its own folder.
fn mixed(d: &Destination, c: &Claimed) -> Option<Attempted> {
    use crate::document::Usage;
    let usage = Usage::of_key(&c.key);
    (usage != d.usage && d.name != crate::config::OUT).then(|| {
        let (document, destination) = match usage {
            Usage::Test => ("a test document", "a production destination"),
            Usage::Production => ("a production document", "a test destination"),
        };
        Attempted::Unsent {
            status: "usage".into(),
            error: format!(
                "{document} is never sent to {destination} ({} says usage = \"{}\" since it was queued): the delivery stays dead",
                d.name,
                match d.usage {
                    Usage::Test => "test",
                    Usage::Production => "production",
                }
            ),
            permanent: true,
        }
    })
}

/// A document whose kept JSON cannot be read back: it can never be sent as it was decided,
/// so its delivery is dead at once (with the reason, for an operator), and the others go on.
fn damaged(why: String) -> Attempted {
    Attempted::Unsent {
        status: "damaged".into(),
        error: why,
        permanent: true,
    }
}

/// What a delivery hands over: the document's JSON as the registry keeps it, or for a row
/// queued before the registry kept documents (schema version 10 and before), the file in
/// `out/` that the round which queued it wrote. That file gone, it can never be sent;
/// unreadable for another reason (no descriptors left, a disk error), it may be later.
fn open(c: &Claimed, body: KeptBody) -> Result<(Box<dyn Read + Send>, u64), Attempted> {
    match body {
        Some(Ok(body)) => {
            let len = body.len() as u64;
            return Ok((Box::new(std::io::Cursor::new(body)), len));
        }
        Some(Err(why)) => return Err(damaged(why)),
        None => {}
    }
    let file = std::fs::File::open(&c.file).map_err(|e| {
        let gone = e.kind() == std::io::ErrorKind::NotFound;
        Attempted::Unsent {
            status: if gone { "no file" } else { "unreadable" }.into(),
            error: format!(
                "{}: {e}{}",
                c.file,
                if gone {
                    "; the document's file is gone"
                } else {
                    ""
                }
            ),
            permanent: gone,
        }
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((Box::new(file), len))
}

/// A header value is visible ASCII: a key with other bytes is sent with them as `%XX`.
fn header_safe(value: &str) -> std::borrow::Cow<'_, str> {
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return value.into();
    }
    value
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect::<String>()
        .into()
}

fn http(
    agent: &ureq::Agent,
    d: &Destination,
    url: &str,
    headers: &[(String, HeaderValue)],
    c: &Claimed,
    body: KeptBody,
) -> Attempted {
    let (file, len) = match open(c, body) {
        Ok(f) => f,
        Err(refused) => return refused,
    };
    let mut request = agent
        .post(url)
        .timeout(Duration::from_millis(d.timeout_ms))
        .set("Content-Type", "application/json")
        .set("Content-Length", &len.to_string())
        .set("Idempotency-Key", &header_safe(&c.idempotency_key))
        .set("X-Correlation-Id", &header_safe(&c.correlation_id));
    for (name, value) in headers {
        let value = match value {
            HeaderValue::Literal(v) => v.clone(),
            HeaderValue::Env(var) => std::env::var(var).unwrap_or_default(),
        };
        request = request.set(name, &value);
    }
    let outcome = answer(d, request.send(file));
    if let Attempted::Failed { status, error } = &outcome {
        if status == PROTOCOL_ERROR {
            tracing::warn!(destination = %d.name, document = %c.key, %error, "the destination's answer was not a whole HTTP answer to this request: not delivered, tried again on a new connection");
        }
    }
    outcome
}

/// What an answer (or its absence) means for the document.
fn answer(d: &Destination, sent: Result<ureq::Response, ureq::Error>) -> Attempted {
    match sent {
        Ok(answer) => {
            let status = answer.status();
            let body = match whole_body(answer) {
                Ok(body) => body,
                Err(broken) => return broken,
            };
            if (200..300).contains(&status) {
                Attempted::Delivered {
                    status: status.to_string(),
                    result_ref: reference(d, &body),
                }
            } else {
                Attempted::Failed {
                    status: status.to_string(),
                    error: format!("answered {status}, not a 2xx"),
                }
            }
        }
        Err(ureq::Error::Status(code, answer)) => {
            let body = match whole_body(answer) {
                Ok(body) => body,
                Err(broken) => return broken,
            };
            match code {
                // Booked before (a retry of a request whose answer was lost): delivered.
                409 => Attempted::Delivered {
                    status: "409".into(),
                    result_ref: reference(d, &body),
                },
                // 408 and 429 ask for another try; any other 4xx refuses this document for good.
                400..=499 if code != 408 && code != 429 => Attempted::Refused {
                    status: code.to_string(),
                    error: excerpt(&body),
                },
                _ => Attempted::Failed {
                    status: code.to_string(),
                    error: excerpt(&body),
                },
            }
        }
        Err(ureq::Error::Transport(t)) => {
            let error = t.to_string();
            let status = if error.contains("timed out") || error.contains("timeout") {
                "timeout".to_string()
            } else if matches!(
                t.kind(),
                ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader
            ) {
                PROTOCOL_ERROR.to_string()
            } else {
                t.kind().to_string()
            };
            Attempted::Failed { status, error }
        }
    }
}

/// The body of an answer, read to its end as its framing says (`Content-Length`, chunked, or
/// the connection's close), its first [`BODY_LIMIT`] bytes kept. An answer that is not whole
/// (cut off, a `Content-Length` that is not a number, longer than [`BODY_CHECKED`]) is a
/// protocol error: whatever its status, it is no proof that the destination took the document.
fn whole_body(answer: ureq::Response) -> Result<Vec<u8>, Attempted> {
    let broken = |error: String| Attempted::Failed {
        status: PROTOCOL_ERROR.into(),
        error,
    };
    let status = answer.status();
    // ureq reads a Content-Length it cannot parse as "until the connection closes".
    let lengths = answer.all("Content-Length");
    if lengths.len() > 1
        || lengths
            .first()
            .is_some_and(|v| v.trim().parse::<u64>().is_err())
    {
        return Err(broken(format!(
            "answered {status} with Content-Length {lengths:?}: not one number"
        )));
    }
    let mut reader = answer.into_reader().take(BODY_CHECKED.saturating_add(1));
    let mut body = Vec::new();
    let read = (&mut reader)
        .take(BODY_LIMIT)
        .read_to_end(&mut body)
        .and_then(|_| std::io::copy(&mut reader, &mut std::io::sink()));
    match read {
        Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
            Err(Attempted::Failed {
                status: "timeout".into(),
                error: format!("answered {status} but its body did not come in time: {e}"),
            })
        }
        Err(e) => Err(broken(format!(
            "answered {status} but its body was not whole: {e}"
        ))),
        Ok(rest) if (body.len() as u64).saturating_add(rest) > BODY_CHECKED => Err(broken(
            format!("answered {status} with a body longer than {BODY_CHECKED} bytes"),
        )),
        Ok(_) => Ok(body),
    }
}

/// The start of an answer's body, for the operator: what the destination said.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body.get(..200).unwrap_or(body));
    text.trim().to_string()
}

/// The business system's reference in an answer's JSON body, at the destination's pointer.
fn reference(d: &Destination, body: &[u8]) -> Option<String> {
    let pointer = d.result_ref.as_deref()?;
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    match value.pointer(pointer)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn command(d: &Destination, argv: &[String], c: &Claimed, body: KeptBody) -> Attempted {
    let (mut file, _) = match open(c, body) {
        Ok(f) => f,
        Err(refused) => return refused,
    };
    let Some((program, args)) = argv.split_first() else {
        return Attempted::Unsent {
            status: "no program".into(),
            error: "the destination names no program".into(),
            permanent: true,
        };
    };
    use std::os::unix::process::CommandExt;
    // A group of its own, so that a timeout kills what the program started too: a child
    // left behind would hold its output open, and this attempt with it.
    let spawned = std::process::Command::new(program)
        .process_group(0)
        .args(args)
        .env("X12GATE_DOCUMENT_KEY", &c.key)
        .env("X12GATE_IDEMPOTENCY_KEY", &c.idempotency_key)
        .env("X12GATE_CORRELATION_ID", &c.correlation_id)
        .env("X12GATE_DESTINATION", &d.name)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return Attempted::Unsent {
                status: "spawn".into(),
                error: format!("{program}: {e}"),
                permanent: false,
            }
        }
    };
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // Fed and read on threads of their own: a program that writes much before it reads (or
    // never reads) must not block us, nor we it. They are never joined: a process the
    // program left behind out of its group (`setsid`) may hold the pipes open for ever, and
    // the attempt ends at its deadline whatever they do.
    std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            let _ = std::io::copy(&mut file, &mut stdin);
            let _ = stdin.flush();
        }
    });
    let out = Output::read(stdout.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = Output::read(stderr.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + Duration::from_millis(d.timeout_ms);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(&child);
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    // The program is done; what it started and left behind in its group goes with it.
    kill_group(&child);
    let grace = deadline.max(Instant::now() + Duration::from_millis(200));
    let stdout = out.collect(grace);
    let stderr = err.collect(grace);
    let said = excerpt(&stderr);
    let Some(status) = status else {
        return Attempted::Failed {
            status: "timeout".into(),
            error: format!("{program} ran past timeout_ms = {}", d.timeout_ms),
        };
    };
    match status.code() {
        Some(0) => Attempted::Delivered {
            status: "exit 0".into(),
            result_ref: String::from_utf8_lossy(&stdout)
                .lines()
                .next()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        },
        Some(COMMAND_REFUSED) => Attempted::Refused {
            status: format!("exit {COMMAND_REFUSED}"),
            error: said,
        },
        Some(code) => Attempted::Failed {
            status: format!("exit {code}"),
            error: said,
        },
        None => Attempted::Failed {
            status: "signal".into(),
            error: format!("{program} was killed by a signal"),
        },
    }
}

/// What a program writes on one of its pipes: the first [`BODY_LIMIT`] bytes, read on a
/// thread of its own, and whether the pipe has ended.
struct Output {
    kept: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    ended: std::sync::mpsc::Receiver<()>,
}

impl Output {
    fn read(pipe: Option<Box<dyn Read + Send>>) -> Output {
        let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (end, ended) = std::sync::mpsc::channel();
        let into = kept.clone();
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let mut chunk = [0u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if let Ok(mut k) = into.lock() {
                                let room = (BODY_LIMIT as usize).saturating_sub(k.len());
                                k.extend_from_slice(chunk.get(..n.min(room)).unwrap_or_default());
                            }
                        }
                    }
                }
            }
            let _ = end.send(());
        });
        Output { kept, ended }
    }

    /// What was read by the time the pipe ended, or `until` if it has not.
    fn collect(self, until: Instant) -> Vec<u8> {
        let _ = self
            .ended
            .recv_timeout(until.saturating_duration_since(Instant::now()));
        self.kept.lock().map(|k| k.clone()).unwrap_or_default()
    }
}

/// Kills the process group the program leads (gone already: nothing to do).
fn kill_group(child: &std::process::Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// A batch of documents written into `d`'s folder (`out/`'s own, by usage, for [`crate::config::OUT`];
/// its `path` for another), each under the name its row records: every file to a temporary
/// name, synced, renamed, and each folder synced once ([`crate::outputs::write_many`]), so
/// that a batch costs one round of fsyncs. A failure fails the batch (tried again; a file
/// written again over itself has the same bytes). `bodies` are the registry's JSON, by row.
pub fn folder(
    d: &Destination,
    claimed: &[Claimed],
    bodies: Vec<KeptBody>,
    owner: &str,
) -> Vec<Attempted> {
    let DestinationKind::Folder { path } = &d.kind else {
        return claimed
            .iter()
            .map(|_| Attempted::Unsent {
                status: "not a folder".into(),
                error: format!("{} is not a folder destination", d.name),
                permanent: false,
            })
            .collect();
    };
    let mut outcomes: Vec<Option<Attempted>> = Vec::with_capacity(claimed.len());
    let mut files: Vec<(std::path::PathBuf, String, Vec<u8>)> = Vec::new();
    let mut at: Vec<usize> = Vec::new();
    for (n, (c, body)) in claimed.iter().zip(bodies).enumerate() {
        let target = Path::new(&c.file);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = match (path, target.parent()) {
            (Some(p), _) => p.clone(),
            (None, Some(parent)) => parent.to_path_buf(),
            (None, None) => std::path::PathBuf::new(),
        };
        let read = match (mixed(d, c), body) {
            (Some(refused), _) => Err(refused),
            (None, Some(Ok(body))) => Ok(body),
            (None, Some(Err(why))) => Err(damaged(why)),
            (None, None) => open(c, None).and_then(|(mut f, _)| {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)
                    .map(|_| bytes)
                    .map_err(|e| Attempted::Unsent {
                        status: "unreadable".into(),
                        error: format!("{}: {e}", c.file),
                        permanent: false,
                    })
            }),
        };
        match read {
            Ok(bytes) => {
                at.push(n);
                files.push((dir, name, bytes));
                outcomes.push(None);
            }
            Err(unsent) => outcomes.push(Some(unsent)),
        }
    }
    let writers: Vec<Box<crate::outputs::Content<'_>>> = files
        .iter()
        .map(|(_, _, bytes)| -> Box<crate::outputs::Content<'_>> {
            Box::new(move |w: &mut dyn Write| w.write_all(bytes))
        })
        .collect();
    let list: Vec<(&Path, &str, &crate::outputs::Content<'_>)> = files
        .iter()
        .zip(&writers)
        .map(|((dir, name, _), w)| (dir.as_path(), name.as_str(), w.as_ref()))
        .collect();
    let written = if list.is_empty() {
        Ok(Vec::new())
    } else {
        crate::outputs::write_many(&list, owner)
    };
    for n in at {
        if let Some(slot) = outcomes.get_mut(n) {
            *slot = Some(match &written {
                Ok(_) => Attempted::Delivered {
                    status: "written".into(),
                    result_ref: None,
                },
                Err(e) => Attempted::Failed {
                    status: "io".into(),
                    error: e.to_string(),
                },
            });
        }
    }
    outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or(Attempted::Failed {
                status: "io".into(),
                error: "not written".into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_and_production_rows_are_never_sent_across() {
        let config = crate::config::Config::from_str(
            "[gateway]\nid_qualifier = \"ZZ\"\nid = \"X\"\n[[destination]]\nname = \"erp\"\nkind = \"http\"\nurl = \"http://127.0.0.1:9/\"\n[[destination]]\nname = \"sandbox\"\nkind = \"http\"\nurl = \"http://127.0.0.1:9/\"\nusage = \"test\"\n",
            std::path::Path::new("p.toml"),
        )
        .unwrap();
        let (erp, sandbox) = (&config.destinations[0], &config.destinations[1]);
        let row = |key: &str| Claimed {
            id: 1,
            document_id: 1,
            key: key.into(),
            idempotency_key: key.into(),
            destination: String::new(),
            partner: "ZZ:ACME".into(),
            interchange_key: "ZZ:ACME:000000001".into(),
            correlation_id: "ZZ:ACME:000000001".into(),
            file: "/nonexistent".into(),
            attempts: 0,
            failures: 0,
            created_ms: 0,
            subject: "ZZ:ACME:850:PO-1".into(),
            sequence: None,
        };
        let (production, test) = (
            row("ZZ:ACME:850:PO-1:00:"),
            row("ZZ:ACME:850:PO-1:00::test"),
        );
        assert_eq!(mixed(erp, &production), None);
        assert_eq!(mixed(sandbox, &test), None);
        for (d, c) in [(erp, &test), (sandbox, &production)] {
            match mixed(d, c) {
                Some(Attempted::Unsent {
                    status,
                    error,
                    permanent: true,
                }) => {
                    assert_eq!(status, "usage");
                    assert!(error.contains("is never sent to"), "{error}");
                }
                other => panic!("{} to {}: {other:?}", c.key, d.name),
            }
        }
        // Sent through `send`, the file is never opened: the row is dead for its usage.
        let agent = ureq::AgentBuilder::new().build();
        assert!(matches!(
            send(&agent, erp, &test, None),
            Attempted::Unsent { status, .. } if status == "usage"
        ));
    }

    #[test]
    fn keys_are_sent_as_visible_ascii() {
        assert_eq!(header_safe("ZZ:ACME:850:PO-1:00:"), "ZZ:ACME:850:PO-1:00:");
        assert_eq!(header_safe("ZZ:\u{e9}"), "ZZ:%C3%A9");
        assert_eq!(header_safe("a\nb"), "a%0Ab");
    }
}
