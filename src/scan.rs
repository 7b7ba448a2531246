//! `scan`: the retrofit. Reads old archives (files and folders, recursively) without claiming,
//! translating or acknowledging anything, and finds every business document key seen more
//! than once: the same content in several interchanges (a resend that was probably booked
//! twice) or other content under one key (a conflict). With `backfill`, records what it read
//! as processed before, so that a partner's later resend of an old document is caught.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{Config, Partner};
use crate::document::{self, Identified};
use crate::input::{InputError, Reader};
use crate::registry::{Registry, RegistryError, Sighting};
use crate::schema::Schemas;

/// Where one document was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Seen {
    pub file: String,
    /// Byte offset of its ST segment in the file.
    pub offset: usize,
    pub interchange: String,
    pub st02: String,
    pub fingerprint: String,
    /// `group.set` in its interchange: the same sighting read twice (a file copied into
    /// two folders) is one.
    #[serde(skip)]
    pub position: String,
}

/// A key seen in more than one interchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Repeated {
    pub key: String,
    pub partner: String,
    pub set: String,
    /// `duplicate` when every sighting has the same content, `conflict` otherwise.
    pub kind: &'static str,
    pub sightings: Vec<Seen>,
}

/// Per partner and set: documents read, keys repeated with the same content, with other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub partner: String,
    pub set: String,
    pub documents: u64,
    pub keys: u64,
    pub duplicates: u64,
    pub conflicts: u64,
}

/// What a scan found.
#[derive(Debug, Default, Serialize)]
pub struct Scan {
    pub files: u64,
    pub interchanges: u64,
    pub documents: u64,
    pub repeated: Vec<Repeated>,
    pub summary: Vec<Tally>,
    /// Files that could not be read, with why (they are skipped, not fatal).
    pub unreadable: Vec<(String, String)>,
    /// With backfill: interchange keys and document keys recorded (those known already are
    /// left as they are).
    pub backfilled_interchanges: u64,
    pub backfilled_documents: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("{path}: {cause}")]
    Walk { path: String, cause: std::io::Error },
    /// A path named to scan that is neither a regular file nor a folder (a FIFO would
    /// hang the read, a device never end).
    #[error("{path}: not a regular file or a folder but {kind}; only regular files and folders are scanned")]
    NotRegular { path: String, kind: &'static str },
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Every file under `paths` (a file stands for itself), in name order. A path named that is
/// neither a file nor a folder is refused; one met inside a folder is listed, and its read
/// refuses it (reported with the files not read).
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ScanError> {
    let mut out = Vec::new();
    let named: std::collections::HashSet<&PathBuf> = paths.iter().collect();
    let mut stack: Vec<PathBuf> = paths.iter().rev().cloned().collect();
    while let Some(p) = stack.pop() {
        let meta = std::fs::metadata(&p).map_err(|cause| ScanError::Walk {
            path: p.display().to_string(),
            cause,
        })?;
        if !meta.is_dir() && !meta.is_file() && named.contains(&p) {
            return Err(ScanError::NotRegular {
                path: p.display().to_string(),
                kind: crate::input::kind_of(&meta),
            });
        }
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&p)
                .and_then(|d| d.map(|e| e.map(|e| e.path())).collect())
                .map_err(|cause| ScanError::Walk {
                    path: p.display().to_string(),
                    cause,
                })?;
            entries.sort();
            stack.extend(entries.into_iter().rev());
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

/// One document read, with what backfill records for it.
struct Read {
    identified: Identified,
    partner: String,
    seen: Seen,
}

/// Scans `paths`; with `backfill`, records into `registry` what was read.
pub fn scan(
    paths: &[PathBuf],
    config: &Config,
    schemas: &Schemas,
    mut backfill: Option<&mut Registry>,
) -> Result<Scan, ScanError> {
    let mut scan = Scan::default();
    let mut by_key: HashMap<String, Vec<Seen>> = HashMap::new();
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut meta: HashMap<String, (String, String)> = HashMap::new();
    for path in files(paths)? {
        scan.files += 1;
        let shown = path.display().to_string();
        let read = read_file(&path, &shown, config, schemas, &mut scan.interchanges);
        let (docs, interchanges) = match read {
            Ok(r) => r,
            Err(e) => {
                scan.unreadable.push((shown, e.to_string()));
                continue;
            }
        };
        if let Some(registry) = backfill.as_deref_mut() {
            let (ics, ds) = record(registry, &docs, &interchanges)?;
            scan.backfilled_interchanges += ics;
            scan.backfilled_documents += ds;
        }
        for d in docs {
            scan.documents += 1;
            let t = tallies
                .entry((d.partner.clone(), d.identified.set_id.clone()))
                .or_insert_with(|| Tally {
                    partner: d.partner.clone(),
                    set: d.identified.set_id.clone(),
                    ..Tally::default()
                });
            t.documents += 1;
            meta.entry(d.identified.key.clone())
                .or_insert_with(|| (d.partner.clone(), d.identified.set_id.clone()));
            by_key.entry(d.identified.key).or_default().push(d.seen);
        }
    }
    let mut keys: Vec<String> = by_key.keys().cloned().collect();
    keys.sort();
    for key in keys {
        let Some(mut sightings) = by_key.remove(&key) else {
            continue;
        };
        // The same set of the same interchange read again (a file copied into another
        // folder) is one sighting; two sets of one interchange, or one ISA13 reused for
        // other content, are two.
        let mut seen = std::collections::HashSet::new();
        sightings.retain(|s| {
            seen.insert((
                s.interchange.clone(),
                s.position.clone(),
                s.fingerprint.clone(),
            ))
        });
        let (partner, set) = meta.get(&key).cloned().unwrap_or_default();
        let t = tallies.entry((partner.clone(), set.clone())).or_default();
        t.keys += 1;
        if sightings.len() < 2 {
            continue;
        }
        let same = sightings.iter().all(|s| {
            sightings
                .first()
                .is_some_and(|f| f.fingerprint == s.fingerprint)
        });
        let kind = if same { "duplicate" } else { "conflict" };
        if same {
            t.duplicates += 1;
        } else {
            t.conflicts += 1;
        }
        scan.repeated.push(Repeated {
            key,
            partner,
            set,
            kind,
            sightings,
        });
    }
    scan.summary = tallies.into_values().collect();
    Ok(scan)
}

/// An interchange read, for backfill: its key, sender, ISA13, fingerprint and file.
struct ReadInterchange {
    key: String,
    partner: String,
    control_number: String,
    fingerprint: String,
    file: String,
    /// What `process` would have decided: a rejected interchange is recorded as rejected,
    /// so that its corrected resend is taken as one.
    disposition: crate::disposition::Disposition,
}

fn read_file(
    path: &Path,
    shown: &str,
    config: &Config,
    schemas: &Schemas,
    interchanges: &mut u64,
) -> Result<(Vec<Read>, Vec<ReadInterchange>), InputError> {
    let mut reader = Reader::open(path, config.limits, crate::input::WINDOW)?;
    let mut docs = Vec::new();
    let mut ics = Vec::new();
    while let Some(piece) = reader.next_piece()? {
        let mut read = piece.interchanges();
        for ic in read.by_ref().flatten() {
            *interchanges += 1;
            let (qualifier, id) = (ic.isa.trimmed(5), ic.isa.trimmed(6));
            let partner = config
                .partner(qualifier, id)
                .cloned()
                .unwrap_or_else(|| Partner::unknown(qualifier, id));
            let key = crate::keys::interchange_key(&ic, partner.duplicates.interchange_scope);
            // What `process` would have accepted: a rejected set was never booked.
            let decision = crate::pipeline::decide(&ic, config, schemas);
            let accepted = |gi: usize, si: usize| {
                decision.response.disposition != crate::disposition::Disposition::Rejected
                    && decision
                        .response
                        .accepted_sets
                        .get(gi)
                        .and_then(|g| g.get(si))
                        .copied()
                        .unwrap_or(false)
            };
            ics.push(ReadInterchange {
                key: key.clone(),
                partner: partner.key(),
                control_number: ic.isa.control_number().to_string(),
                fingerprint: crate::fingerprint::fingerprint(
                    &ic,
                    &partner.duplicates.fingerprint_ignore,
                ),
                file: std::path::absolute(path)
                    .map_or_else(|_| shown.to_string(), |p| p.display().to_string()),
                disposition: decision.response.disposition,
            });
            let schemas = schemas.for_sender(ic.isa.trimmed(5), ic.isa.trimmed(6));
            for (gi, group) in ic.groups.iter().enumerate() {
                let version = group.gs.element(8).unwrap_or_default();
                for (si, set) in group.sets.iter().enumerate() {
                    if !accepted(gi, si) {
                        continue;
                    }
                    let Some(def) = schemas.find(version, set.st.element(1).unwrap_or_default())
                    else {
                        continue;
                    };
                    let st02 = document::part(set.st.element(2).unwrap_or_default()).into_owned();
                    for identified in document::identify_all(&ic, &set, def) {
                        docs.push(Read {
                            seen: Seen {
                                file: shown.to_string(),
                                offset: set.st.offset,
                                interchange: key.clone(),
                                st02: st02.clone(),
                                fingerprint: identified.fingerprint.clone(),
                                position: identified.position(gi, si),
                            },
                            identified,
                            partner: partner.key(),
                        });
                    }
                }
            }
        }
        let resume = read.resume();
        reader.advance(resume);
    }
    Ok((docs, ics))
}

/// Backfill of one file, in one transaction: returns the interchanges and documents recorded.
fn record(
    registry: &mut Registry,
    docs: &[Read],
    ics: &[ReadInterchange],
) -> Result<(u64, u64), RegistryError> {
    registry.batch(|b| {
        let mut recorded = (0, 0);
        let mut new = std::collections::HashSet::new();
        for ic in ics {
            if b.backfill_interchange(
                &ic.key,
                &ic.partner,
                &ic.control_number,
                &ic.fingerprint,
                &ic.file,
                ic.disposition,
            )? {
                recorded.0 += 1;
                new.insert(ic.key.as_str());
            }
        }
        // An interchange the registry knew (processed, perhaps rejected) keeps its own
        // record of its documents.
        for d in docs
            .iter()
            .filter(|d| new.contains(d.seen.interchange.as_str()))
        {
            let i = &d.identified;
            let sighting = Sighting {
                key: &i.key,
                subject: &i.subject,
                partner: &d.partner,
                set_id: &i.set_id,
                role: i.role,
                version: i.version.as_deref(),
                fingerprint: &i.fingerprint,
                interchange_key: &d.seen.interchange,
                position: &d.seen.position,
                st02: &d.seen.st02,
                deliver_duplicates: false,
            };
            if b.backfill_document(&sighting)? {
                recorded.1 += 1;
            }
        }
        Ok(recorded)
    })
}
