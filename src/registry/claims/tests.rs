//! `claim()`'s whole state table, and the verbs that lead into its states.
//!
//! Every case starts from a key claimed by `FIRST` at `T0` for content `A`, with control
//! numbers reserved, then brought into one previous state by the verb that does it in
//! production; a second claim is made at a chosen time, for the same or other content, by
//! the holder or another process, with the holder alive or dead. The decision and the whole
//! row afterwards are compared with what the table below says.

use crate::registry::db::Conn;

use super::*;
use crate::registry::Identity;

const LEASE: i64 = 60_000;
/// When `FIRST` claimed the key; its lease runs out at `T0 + LEASE`.
const T0: i64 = 1_700_000_000_000;
const FIRST: &str = "host-a:100:1";
const SECOND: &str = "host-b:200:1";
const KEY: &str = "ZZ:ACME:000000101";
/// The content first claimed, and another content under the same control number.
const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbb";
const OUTPUT: &str = "/out/ZZ_ACME_000000101.json";

fn registry() -> Registry {
    Registry::in_memory(Identity {
        qualifier: "ZZ",
        id: "US",
    })
}

fn nobody_dead(_: &str) -> bool {
    false
}

fn request<'a>(
    fingerprint: &'a str,
    owner: &'a str,
    file: &'a str,
    is_dead: &'a dyn Fn(&str) -> bool,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key: KEY,
        partner: "ZZ:ACME",
        control_number: "000000101",
        fingerprint,
        file,
        owner,
        lease_ms: LEASE,
        is_dead,
    }
}

fn ack() -> StoredAck {
    StoredAck {
        kind: "997".into(),
        path: "ZZ_ACME_000000101.997.x12".into(),
        bytes: b"ISA*00*...~".to_vec(),
    }
}

/// Everything the registry holds for `KEY`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    state: ClaimState,
    fingerprint: String,
    owner: Option<String>,
    lease_expires: Option<i64>,
    attempts: u32,
    disposition: Option<Disposition>,
    reason_code: Option<String>,
    reason: Option<String>,
    reservation: Option<String>,
    outputs: Option<String>,
    file: Option<String>,
    first_seen: i64,
    last_seen: i64,
    /// (attempt, fingerprint, seen)
    fingerprints: Vec<(u32, String, i64)>,
    acks: Vec<(i64, String)>,
}

fn row(conn: &Conn) -> Row {
    let mut row = conn
        .query_row(
            "SELECT state, fingerprint, owner, lease_expires, attempts, disposition, reason_code,
                    reason, reservation, outputs, file, first_seen, last_seen
             FROM interchanges WHERE key = ?1",
            [KEY],
            |r| {
                Ok(Row {
                    state: r.get(0)?,
                    fingerprint: r.get(1)?,
                    owner: r.get(2)?,
                    lease_expires: r.get(3)?,
                    attempts: r.get(4)?,
                    disposition: r.get(5)?,
                    reason_code: r.get(6)?,
                    reason: r.get(7)?,
                    reservation: r.get(8)?,
                    outputs: r.get(9)?,
                    file: r.get(10)?,
                    first_seen: r.get(11)?,
                    last_seen: r.get(12)?,
                    fingerprints: Vec::new(),
                    acks: Vec::new(),
                })
            },
        )
        .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT attempt, fingerprint, seen FROM fingerprints WHERE key = ?1 ORDER BY attempt",
        )
        .unwrap();
    row.fingerprints = stmt
        .query_map([KEY], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, path FROM acks WHERE key = ?1 ORDER BY seq")
        .unwrap();
    row.acks = stmt
        .query_map([KEY], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    row
}

/// The state the key is in when the second claim comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    /// Claimed, not finished.
    InFlight,
    /// Marked failed by its owner (an operational error or a stop).
    Failed,
    /// Released by an operator (`claims release`).
    Released,
    Completed(Disposition),
    /// Completed, then opened again by `reprocess`.
    Reopened(Disposition),
}

fn arrange(r: &mut Registry, before: Before) {
    let first = claim(
        &r.conn,
        &request(A, FIRST, "/in/first.x12", &nobody_dead),
        T0,
    )
    .unwrap();
    assert_eq!(
        first,
        Claim::Owned {
            attempt: 1,
            previous: Previous::New,
            first_fingerprint: A.into()
        }
    );
    let (isa13, gs06) = crate::registry::counters::take_in(&r.conn, "ZZ:ACME", 1, 1).unwrap();
    let reservation = Reservation {
        at_ms: T0,
        isa13,
        gs06,
    };
    keep_reservation(&r.conn, KEY, &reservation).unwrap();
    match before {
        Before::InFlight => {}
        Before::Failed => assert!(fail(&r.conn, KEY, FIRST, "disk full").unwrap()),
        Before::Released => assert!(r.release(KEY, FIRST, "released by an operator").unwrap()),
        Before::Completed(d) | Before::Reopened(d) => {
            let ack = ack();
            let completion = Completion {
                disposition: d,
                reason_code: Some("024"),
                reason: Some("why"),
                acks: &[ack.to_store()],
                outputs: &[OUTPUT.to_string()],
                released_groups: &[],
                event: d.into(),
                detail: "{}",
            };
            assert!(complete(&r.conn, KEY, FIRST, &completion).unwrap());
            if matches!(before, Before::Reopened(_)) {
                assert_eq!(r.reopen(KEY, true).unwrap(), Some(d));
            }
        }
    }
    // The reservation must be there to be kept or dropped (a reopening drops it itself).
    assert_eq!(
        row(&r.conn).reservation.is_some(),
        !matches!(before, Before::Reopened(_)),
        "{before:?}"
    );
}

/// What a conflict or a duplicate reports of the earlier attempt.
fn earlier(before: Before) -> Completed {
    let unfinished = |reason: Option<&str>| Completed {
        disposition: None,
        reason_code: None,
        reason: reason.map(String::from),
        fingerprint: A.into(),
        acks: Vec::new(),
        outputs: Vec::new(),
        attempts: 1,
    };
    match before {
        Before::InFlight => unfinished(None),
        Before::Failed => unfinished(Some("disk full")),
        Before::Released => unfinished(Some("released by an operator")),
        Before::Completed(d) | Before::Reopened(d) => Completed {
            disposition: Some(d),
            reason_code: Some("024".into()),
            reason: Some("why".into()),
            fingerprint: A.into(),
            acks: vec![ack()],
            outputs: vec![OUTPUT.into()],
            attempts: 1,
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// `A` again (a resend, or a rerun after a crash).
    Same,
    /// `B` under the same key (a corrected resend, or a reused control number).
    Other,
}

/// When the second claim comes: one millisecond before `FIRST`'s lease runs out, or the
/// very millisecond it does (a lease is live while its expiry is still ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    Live,
    Expired,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claimant {
    /// `FIRST` itself claims again.
    Holder,
    /// `SECOND` claims.
    Another,
}

/// Whether `FIRST`, the holder, is known to be dead (a crashed process on this host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Alive,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Busy,
    Duplicate,
    Conflict,
    /// Owned as attempt 2, taken over from this.
    TakeOver(Previous),
}

fn expired() -> Decision {
    Decision::TakeOver(Previous::Expired {
        owner: FIRST.into(),
    })
}

/// Makes the second claim on a key in state `before` and checks the decision and the row.
fn check(
    before: Before,
    content: Content,
    lease: Lease,
    claimant: Claimant,
    holder: Holder,
    expect: &Decision,
) {
    let case = format!(
        "{before:?}, {content:?} content, {lease:?} lease, claimed by {claimant:?}, holder {holder:?}"
    );
    let mut r = registry();
    arrange(&mut r, before);
    let was = row(&r.conn);
    let now = match lease {
        Lease::Live => T0 + LEASE - 1,
        Lease::Expired => T0 + LEASE,
    };
    let (fingerprint, file) = match content {
        Content::Same => (A, "/in/again.x12"),
        Content::Other => (B, "/in/corrected.x12"),
    };
    let owner = match claimant {
        Claimant::Holder => FIRST,
        Claimant::Another => SECOND,
    };
    let dead = holder == Holder::Dead;
    let is_dead = move |o: &str| dead && o == FIRST;
    let got = claim(&r.conn, &request(fingerprint, owner, file, &is_dead), now).unwrap();
    let after = row(&r.conn);
    // Only the last sighting changes when the claim is not ours.
    let untouched = Row {
        last_seen: now,
        ..was.clone()
    };
    match expect {
        Decision::Busy => {
            assert_eq!(
                got,
                Claim::Busy {
                    owner: FIRST.into(),
                    lease_expires_ms: T0 + LEASE
                },
                "{case}"
            );
            assert_eq!(after, untouched, "{case}");
        }
        Decision::Duplicate => {
            assert_eq!(got, Claim::Duplicate(earlier(before)), "{case}");
            assert_eq!(after, untouched, "{case}");
        }
        Decision::Conflict => {
            assert_eq!(got, Claim::Conflict(earlier(before)), "{case}");
            assert_eq!(after, untouched, "{case}");
        }
        Decision::TakeOver(previous) => {
            assert_eq!(
                got,
                Claim::Owned {
                    attempt: 2,
                    previous: previous.clone(),
                    first_fingerprint: A.into()
                },
                "{case}"
            );
            let mut fingerprints = was.fingerprints.clone();
            fingerprints.push((2, fingerprint.into(), now));
            let taken = Row {
                state: ClaimState::InFlight,
                fingerprint: fingerprint.into(),
                owner: Some(owner.into()),
                lease_expires: Some(now + LEASE),
                attempts: 2,
                disposition: None,
                reason_code: None,
                reason: None,
                // Numbers reserved for a content are never used for another.
                reservation: match content {
                    Content::Same => was.reservation.clone(),
                    Content::Other => None,
                },
                file: Some(file.into()),
                last_seen: now,
                fingerprints,
                // The earlier answers stay until this attempt completes with its own.
                ..was.clone()
            };
            assert_eq!(after, taken, "{case}");
        }
    }
}

const LEASES: [Lease; 2] = [Lease::Live, Lease::Expired];
const CLAIMANTS: [Claimant; 2] = [Claimant::Holder, Claimant::Another];
const HOLDERS: [Holder; 2] = [Holder::Alive, Holder::Dead];

crate::registry::tests::on_both! {
    fn an_in_flight_claim() {
        use Claimant::{Another, Holder as Itself};
        use Content::{Other, Same};
        use Holder::{Alive, Dead};
        use Lease::{Expired, Live};
        let dead = Decision::TakeOver(Previous::Dead {
            owner: FIRST.into(),
        });
        #[rustfmt::skip]
        let table = [
            // content, lease, claimed by, holder: decision
            (Same,  Live,    Another, Alive, Decision::Busy),
            (Same,  Live,    Another, Dead,  dead),
            // The holder meeting its own key again owns it again, as after an expiry.
            (Same,  Live,    Itself,  Alive, expired()),
            (Same,  Live,    Itself,  Dead,  expired()),
            (Same,  Expired, Another, Alive, expired()),
            (Same,  Expired, Another, Dead,  expired()),
            (Same,  Expired, Itself,  Alive, expired()),
            (Same,  Expired, Itself,  Dead,  expired()),
            // A live holder is waited for whatever the content: it may yet complete.
            (Other, Live,    Another, Alive, Decision::Busy),
            // Otherwise other content meets outputs the attempt may have written already.
            (Other, Live,    Another, Dead,  Decision::Conflict),
            (Other, Live,    Itself,  Alive, Decision::Conflict),
            (Other, Live,    Itself,  Dead,  Decision::Conflict),
            (Other, Expired, Another, Alive, Decision::Conflict),
            (Other, Expired, Another, Dead,  Decision::Conflict),
            (Other, Expired, Itself,  Alive, Decision::Conflict),
            (Other, Expired, Itself,  Dead,  Decision::Conflict),
        ];
        for (content, lease, claimant, holder, decision) in &table {
            check(
                Before::InFlight,
                *content,
                *lease,
                *claimant,
                *holder,
                decision,
            );
        }
    }
}

// A claim that is not in flight holds no lease: the time, the claimant and whether the
// last owner is alive change nothing, which every combination of them checks.
crate::registry::tests::on_both! {
    fn a_claim_not_in_flight() {
        use Disposition::{Accepted, Partial, Rejected};
        let failed = || Decision::TakeOver(Previous::Failed);
        let table = [
            (Before::Failed, Content::Same, failed()),
            (Before::Failed, Content::Other, Decision::Conflict),
            (Before::Released, Content::Same, failed()),
            (Before::Released, Content::Other, Decision::Conflict),
            (
                Before::Completed(Accepted),
                Content::Same,
                Decision::Duplicate,
            ),
            (
                Before::Completed(Accepted),
                Content::Other,
                Decision::Conflict,
            ),
            (
                Before::Completed(Partial),
                Content::Same,
                Decision::Duplicate,
            ),
            (
                Before::Completed(Partial),
                Content::Other,
                Decision::Conflict,
            ),
            // An exact resend of a rejected interchange is answered as it was.
            (
                Before::Completed(Rejected),
                Content::Same,
                Decision::Duplicate,
            ),
            // A corrected one is a new attempt.
            (
                Before::Completed(Rejected),
                Content::Other,
                Decision::TakeOver(Previous::Rejected {
                    fingerprint: A.into(),
                }),
            ),
            (Before::Reopened(Rejected), Content::Same, failed()),
            (
                Before::Reopened(Rejected),
                Content::Other,
                Decision::Conflict,
            ),
            (Before::Reopened(Accepted), Content::Same, failed()),
            (
                Before::Reopened(Accepted),
                Content::Other,
                Decision::Conflict,
            ),
        ];
        for (before, content, decision) in &table {
            for lease in LEASES {
                for claimant in CLAIMANTS {
                    for holder in HOLDERS {
                        check(*before, *content, lease, claimant, holder, decision);
                    }
                }
            }
        }
    }
}

crate::registry::tests::on_both! {
    fn a_new_key() {
        let r = registry();
        let got = claim(
            &r.conn,
            &request(A, FIRST, "/in/first.x12", &nobody_dead),
            T0,
        )
        .unwrap();
        assert_eq!(
            got,
            Claim::Owned {
                attempt: 1,
                previous: Previous::New,
                first_fingerprint: A.into()
            }
        );
        assert_eq!(
            row(&r.conn),
            Row {
                state: ClaimState::InFlight,
                fingerprint: A.into(),
                owner: Some(FIRST.into()),
                lease_expires: Some(T0 + LEASE),
                attempts: 1,
                disposition: None,
                reason_code: None,
                reason: None,
                reservation: None,
                outputs: None,
                file: Some("/in/first.x12".into()),
                first_seen: T0,
                last_seen: T0,
                fingerprints: vec![(1, A.into(), T0)],
                acks: Vec::new(),
            }
        );
        let (partner, control): (String, String) = r
            .conn
            .query_row(
                "SELECT partner, control_number FROM interchanges WHERE key = ?1",
                [KEY],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (partner.as_str(), control.as_str()),
            ("ZZ:ACME", "000000101")
        );
    }
}

// A lease of any length stays ahead of the claim: a huge one once wrapped negative, and a
// live claim was taken over at once.
crate::registry::tests::on_both! {
    fn a_huge_lease_ends_at_the_end_of_time_not_before_it_began() {
        let r = registry();
        let huge = |owner| ClaimRequest {
            lease_ms: i64::MAX,
            ..request(A, owner, "/in/a.x12", &nobody_dead)
        };
        assert!(matches!(
            claim(&r.conn, &huge(FIRST), T0).unwrap(),
            Claim::Owned { attempt: 1, .. }
        ));
        let busy = Claim::Busy {
            owner: FIRST.into(),
            lease_expires_ms: i64::MAX,
        };
        assert_eq!(claim(&r.conn, &huge(SECOND), T0 + 1_000).unwrap(), busy);
        // Taken over once failed, the new holder's huge lease holds as well.
        fail(&r.conn, KEY, FIRST, "stopped").unwrap();
        assert!(matches!(
            claim(&r.conn, &huge(SECOND), T0 + 2_000).unwrap(),
            Claim::Owned { attempt: 2, .. }
        ));
        assert_eq!(
            claim(&r.conn, &huge(FIRST), T0 + 3_000).unwrap(),
            Claim::Busy {
                owner: SECOND.into(),
                lease_expires_ms: i64::MAX,
            }
        );
        assert_eq!(row(&r.conn).lease_expires, Some(i64::MAX));
    }
}

// Outputs are named after the content first claimed, however many corrections follow.
crate::registry::tests::on_both! {
    fn every_attempt_knows_the_first_content() {
        let mut r = registry();
        arrange(&mut r, Before::Completed(Disposition::Rejected));
        let second = claim(
            &r.conn,
            &request(B, SECOND, "/in/b.x12", &nobody_dead),
            T0 + 1,
        )
        .unwrap();
        assert_eq!(
            second,
            Claim::Owned {
                attempt: 2,
                previous: Previous::Rejected {
                    fingerprint: A.into()
                },
                first_fingerprint: A.into()
            }
        );
        let rejected = Completion {
            disposition: Disposition::Rejected,
            reason_code: None,
            reason: None,
            acks: &[],
            outputs: &[],
            released_groups: &[],
            event: EventKind::Rejected,
            detail: "{}",
        };
        assert!(complete(&r.conn, KEY, SECOND, &rejected).unwrap());
        let third = claim(
            &r.conn,
            &request("cccccccccccccccccccccccc", FIRST, "/in/c.x12", &nobody_dead),
            T0 + 2,
        )
        .unwrap();
        assert_eq!(
            third,
            Claim::Owned {
                attempt: 3,
                previous: Previous::Rejected {
                    fingerprint: B.into()
                },
                first_fingerprint: A.into()
            }
        );
        assert_eq!(
            row(&r.conn)
                .fingerprints
                .iter()
                .map(|(n, f, _)| (*n, f.as_str()))
                .collect::<Vec<_>>(),
            [(1, A), (2, B), (3, "cccccccccccccccccccccccc")]
        );
    }
}

/// A word the registry never writes is an error, never a decision: before the states were
/// typed, an unknown state was taken over as if it had failed.
#[test]
fn an_unknown_word_in_the_row_is_an_error() {
    let mut r = registry();
    arrange(&mut r, Before::Completed(Disposition::Accepted));
    r.conn
        .execute("UPDATE interchanges SET disposition = 'maybe'", [])
        .unwrap();
    let got = claim(&r.conn, &request(B, SECOND, "/in/b.x12", &nobody_dead), T0);
    assert!(
        matches!(got, Err(crate::registry::db::Error::Decode { .. })),
        "{got:?}"
    );
    r.conn
        .execute_batch(
            "PRAGMA ignore_check_constraints = ON;
             UPDATE interchanges SET state = 'paused', disposition = NULL;",
        )
        .unwrap();
    let got = claim(&r.conn, &request(A, SECOND, "/in/a.x12", &nobody_dead), T0);
    assert!(
        matches!(got, Err(crate::registry::db::Error::Decode { .. })),
        "{got:?}"
    );
    let attempts: u32 = r
        .conn
        .query_row("SELECT attempts FROM interchanges", [], |r| r.get(0))
        .unwrap();
    assert_eq!(attempts, 1);
}

fn events(r: &Registry) -> Vec<Event> {
    r.history(&EventFilter {
        key: Some(KEY.into()),
        ..EventFilter::default()
    })
    .unwrap()
}

crate::registry::tests::on_both! {
    fn a_release_fails_only_the_holders_claim_and_notes_it() {
        let mut r = registry();
        arrange(&mut r, Before::InFlight);
        let was = row(&r.conn);
        assert!(!r.release(KEY, SECOND, "not mine").unwrap());
        assert_eq!(row(&r.conn), was);
        assert!(events(&r).is_empty());
        assert!(r.release(KEY, FIRST, "released by an operator").unwrap());
        assert_eq!(
            row(&r.conn),
            Row {
                state: ClaimState::Failed,
                owner: None,
                lease_expires: None,
                reason: Some("released by an operator".into()),
                ..was
            }
        );
        let notes = events(&r);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].event, EventKind::Released);
        assert_eq!(notes[0].disposition, None);
        assert_eq!(notes[0].partner.as_deref(), Some("ZZ:ACME"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&notes[0].detail).unwrap(),
            serde_json::json!({ "released_from": FIRST, "reason": "released by an operator" })
        );
        // Once failed, there is nothing left to release.
        assert!(!r.release(KEY, FIRST, "again").unwrap());
    }
}

crate::registry::tests::on_both! {
    fn a_reopening_and_its_undoing() {
        let mut r = registry();
        assert_eq!(r.reopen(KEY, true).unwrap(), None, "no such key");
        arrange(&mut r, Before::InFlight);
        assert_eq!(r.reopen(KEY, true).unwrap(), None, "not completed");

        let mut r = registry();
        arrange(&mut r, Before::Completed(Disposition::Accepted));
        let was = row(&r.conn);
        assert_eq!(r.reopen(KEY, false).unwrap(), None, "accepted, not forced");
        assert_eq!(row(&r.conn), was);
        assert_eq!(r.reopen(KEY, true).unwrap(), Some(Disposition::Accepted));
        assert_eq!(
            row(&r.conn),
            Row {
                state: ClaimState::Failed,
                owner: None,
                lease_expires: None,
                reservation: None,
                ..was.clone()
            }
        );
        let reopened = events(&r).pop().unwrap();
        assert_eq!(
            (reopened.event, reopened.disposition),
            (EventKind::Reopened, None)
        );
        let detail: serde_json::Value = serde_json::from_str(&reopened.detail).unwrap();
        assert_eq!(detail["was"], "accepted");
        assert_eq!(detail["acks"][0]["kind"], "997");
        r.restore(KEY, Disposition::Accepted).unwrap();
        assert_eq!(
            row(&r.conn),
            Row {
                reservation: None,
                ..was
            }
        );

        let mut r = registry();
        arrange(&mut r, Before::Completed(Disposition::Rejected));
        assert_eq!(r.reopen(KEY, false).unwrap(), Some(Disposition::Rejected));
        // Restoring is refused once somebody claimed it again.
        claim(
            &r.conn,
            &request(A, SECOND, "/in/a.x12", &nobody_dead),
            T0 + 1,
        )
        .unwrap();
        r.restore(KEY, Disposition::Rejected).unwrap();
        assert_eq!(row(&r.conn).state, ClaimState::InFlight);
    }
}

// Before a release became a note, one development build recorded it with the
// disposition `failed`; such rows read as notes, any other unknown disposition is an error.
crate::registry::tests::on_both! {
    fn the_history_reads_every_event_ever_written() {
        let r = registry();
        for (event, disposition) in [
            ("released", Some("failed")),
            ("accepted", Some("accepted")),
            ("placed", None),
        ] {
            r.conn
                .execute(
                    "INSERT INTO events (at, event, key, disposition, detail) VALUES (1, ?1, ?2, ?3, '{}')",
                    crate::registry::db::params![event, KEY, disposition],
                )
                .unwrap();
        }
        let read: Vec<(EventKind, Option<Disposition>)> = events(&r)
            .into_iter()
            .map(|e| (e.event, e.disposition))
            .collect();
        assert_eq!(
            read,
            [
                (EventKind::Released, None),
                (EventKind::Accepted, Some(Disposition::Accepted)),
                (EventKind::Placed, None),
            ]
        );
        let accepted = r
            .history(&EventFilter {
                disposition: Some(Disposition::Accepted),
                ..EventFilter::default()
            })
            .unwrap();
        assert_eq!(accepted.len(), 1);
        r.conn
            .execute(
                "INSERT INTO events (at, event, disposition, detail) VALUES (2, 'conflict', 'failed', '{}')",
                [],
            )
            .unwrap();
        assert!(r.history(&EventFilter::default()).is_err());
    }
}

crate::registry::tests::on_both! {
    /// Keys claimed together (their INSERTs sent at once) get the decisions, and leave the
    /// rows, that claiming them one after the other does: a new key, the same key again in
    /// the same call, another content under it, and a key completed before.
    fn keys_claimed_together_are_decided_as_one_after_the_other() {
        let done = ClaimRequest {
            key: "ZZ:ACME:000000103",
            ..request(A, FIRST, "/in/done.x12", &nobody_dead)
        };
        let requests = [
            request(A, FIRST, "/in/first.x12", &nobody_dead),
            ClaimRequest {
                key: "ZZ:ACME:000000102",
                ..request(B, FIRST, "/in/second.x12", &nobody_dead)
            },
            request(A, SECOND, "/in/again.x12", &nobody_dead),
            request(B, SECOND, "/in/other.x12", &nobody_dead),
            done.clone(),
        ];
        let arranged = || {
            let r = registry();
            assert!(matches!(claim(&r.conn, &done, T0).unwrap(), Claim::Owned { .. }));
            let ack = ack();
            let completion = Completion {
                disposition: Disposition::Accepted,
                reason_code: None,
                reason: None,
                acks: &[ack.to_store()],
                outputs: &[],
                released_groups: &[],
                event: Disposition::Accepted.into(),
                detail: "{}",
            };
            assert!(complete(&r.conn, done.key, FIRST, &completion).unwrap());
            r
        };
        let (one_by_one, together) = (arranged(), arranged());
        let expected: Vec<Claim> = requests
            .iter()
            .map(|req| claim(&one_by_one.conn, req, T0 + 1).unwrap())
            .collect();
        let got = claim_many(&together.conn, &requests, T0 + 1).unwrap();
        assert_eq!(got, expected);
        assert!(matches!(got.first(), Some(Claim::Owned { attempt: 1, .. })), "{got:?}");
        assert!(matches!(got.last(), Some(Claim::Duplicate(_))), "{got:?}");
        let rows = |r: &Registry| -> Vec<(String, String, String, Option<String>, i64)> {
            r.conn
                .query_map(
                    "SELECT key, state, fingerprint, owner, attempts FROM interchanges ORDER BY key",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(rows(&together), rows(&one_by_one));
        assert_eq!(rows(&together).len(), 3);
    }
}

crate::registry::tests::on_both! {
    /// An acknowledgment of a few MiB (the 997 of a hundred thousand sets) is stored a part
    /// at a time and replayed byte for byte; a later attempt's smaller one leaves none of
    /// its parts behind, and `prune` takes them with their interchange.
    fn a_large_acknowledgment_is_stored_in_parts_and_replayed_whole() {
        let mut r = registry();
        let parts = |r: &Registry| -> i64 {
            r.conn
                .query_row("SELECT count(*) FROM ack_parts", [], |row| row.get(0))
                .unwrap()
        };
        // Two and a half parts, each different: a part stored twice, lost or out of order
        // shows in the bytes replayed.
        let big: Vec<u8> = (0..ACK_PART * 5 / 2)
            .map(|i| (i % 251) as u8 ^ (i / ACK_PART) as u8)
            .collect();
        let small = ack();
        let completed = |r: &Registry, acks: &[StoredAck], at: i64| {
            let owned = claim(&r.conn, &request(A, FIRST, "/in/a.x12", &nobody_dead), at).unwrap();
            assert!(matches!(owned, Claim::Owned { .. }), "{owned:?}");
            let acks: Vec<AckToStore<'_>> = acks.iter().map(StoredAck::to_store).collect();
            let completion = Completion {
                disposition: Disposition::Accepted,
                reason_code: None,
                reason: None,
                acks: &acks,
                outputs: &[],
                released_groups: &[],
                event: EventKind::Accepted,
                detail: "{}",
            };
            assert!(complete(&r.conn, KEY, FIRST, &completion).unwrap());
        };
        let replayed = |r: &Registry, at: i64| -> Vec<StoredAck> {
            match claim(&r.conn, &request(A, SECOND, "/in/b.x12", &nobody_dead), at).unwrap() {
                Claim::Duplicate(done) => done.acks,
                other => panic!("{other:?}"),
            }
        };
        let large = StoredAck {
            kind: "997".into(),
            path: "a.997".into(),
            bytes: big,
        };
        let first = [small.clone(), large.clone()];
        completed(&r, &first, T0);
        assert_eq!(parts(&r), 2);
        let again = replayed(&r, T0 + 1);
        assert!(again == first, "the acknowledgments replayed are not those stored");

        // Opened again and completed with a small one only: nothing of the large one stays.
        // The history keeps the beginning of what was sent, and its size.
        assert!(r.reopen(KEY, true).unwrap().is_some());
        let reopened = events(&r).pop().unwrap();
        // Escaped as JSON, a byte takes at most 6.
        assert!(reopened.detail.len() < 7 * KEPT_IN_HISTORY, "{}", reopened.detail.len());
        let detail: serde_json::Value = serde_json::from_str(&reopened.detail).unwrap();
        assert_eq!(detail["acks"][1]["size"], large.bytes.len());
        assert_eq!(detail["acks"][0]["size"], small.bytes.len());
        completed(&r, std::slice::from_ref(&small), T0 + 2);
        assert_eq!(parts(&r), 0);
        assert_eq!(replayed(&r, T0 + 3), std::slice::from_ref(&small));

        // Made as it is stored, in uneven pieces, in a transaction (where PostgreSQL queues
        // writes): the same parts, the same bytes replayed, and never more than a part
        // waiting to be sent.
        assert!(r.reopen(KEY, true).unwrap().is_some());
        let tx = r.conn.transaction().unwrap();
        let owned = claim(&tx, &request(A, FIRST, "/in/a.x12", &nobody_dead), T0 + 4).unwrap();
        assert!(matches!(owned, Claim::Owned { .. }), "{owned:?}");
        let most_queued = std::cell::Cell::new(0);
        let make = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
            large.bytes.chunks(7000).try_for_each(|piece| {
                most_queued.set(most_queued.get().max(tx.queued_bytes()));
                out.write_all(piece)
            })
        };
        let made = AckToStore {
            kind: "997",
            path: "a.997",
            bytes: AckBytes::Made(&make),
        };
        let completion = Completion {
            disposition: Disposition::Accepted,
            reason_code: None,
            reason: None,
            acks: &[small.to_store(), made],
            outputs: &[],
            released_groups: &[],
            event: EventKind::Accepted,
            detail: "{}",
        };
        assert!(complete(&tx, KEY, FIRST, &completion).unwrap());
        assert!(most_queued.get() < ACK_PART, "{} bytes queued", most_queued.get());
        tx.commit().unwrap();
        assert_eq!(parts(&r), 2);
        assert!(replayed(&r, T0 + 5) == first, "the acknowledgment made is not the one replayed");

        // At the parts' edges: no empty part after a full one, an empty ack still a row.
        for (n, (size, stored_parts)) in [(0, 0), (ACK_PART, 0), (ACK_PART + 1, 1), (2 * ACK_PART, 1)]
            .into_iter()
            .enumerate()
        {
            assert!(r.reopen(KEY, true).unwrap().is_some());
            let at = T0 + 10 + 2 * n as i64;
            let edge = StoredAck {
                bytes: large.bytes.get(..size).unwrap().to_vec(),
                ..large.clone()
            };
            completed(&r, std::slice::from_ref(&edge), at);
            assert_eq!(parts(&r), stored_parts, "{size} bytes");
            assert!(replayed(&r, at + 1) == [edge], "{size} bytes");
        }

        // A prune takes the parts with their interchange.
        assert!(r.reopen(KEY, true).unwrap().is_some());
        completed(&r, std::slice::from_ref(&large), T0 + 30);
        assert_eq!(parts(&r), 2);
        r.age_for_tests(KEY, 400).unwrap();
        assert_eq!(r.prune(&|_| 30).unwrap(), [KEY.to_string()]);
        assert_eq!(parts(&r), 0);
    }
}
