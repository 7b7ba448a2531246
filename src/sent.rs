//! The control numbers we sent: read back from the outbox (and from the registry's copies of
//! our acknowledgments), so that a registry older than the outbox (restored from a backup,
//! or a counter set back by hand) never hands a partner an ISA13 or GS06 it already has.
//! `init` reads them to start the counters of a rebuilt registry; `check`, `process` and
//! `watch` compare them with the registry's counters at start-up.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::registry::{Counter, MAX_CONTROL_NUMBER};

/// The bytes read from the start of each outbox file: the ISA (106 bytes) and the GS of our
/// first group are in them; a file no longer than this is read whole.
pub const HEAD: usize = 4096;

/// The bytes read from the end of a longer file: its IEA, whose count of groups gives the
/// GS06 of the last one (our groups in one interchange take consecutive numbers).
const TAIL: usize = 64;

/// Where our interchanges are written: the outbox (acknowledgments, and our documents to
/// partners without a folder of their own) first, then each partner's `outbound` folder.
pub fn folders(config: &crate::config::Config) -> Vec<std::path::PathBuf> {
    let mut all = vec![config.gateway.outbox.clone()];
    for p in &config.partners {
        if let Some(f) = &p.outbound.folder {
            if !all.contains(f) {
                all.push(f.clone());
            }
        }
    }
    all
}

/// One number we sent: to whom (the receiver's `QUAL:ID`), which counter, the number.
pub type Sent = (String, Counter, u32);

/// The numbers one of our interchanges carries, read from its `head` (the file's first
/// [`HEAD`] bytes, or all of it when `whole`) and `tail` (its last bytes otherwise): its ISA13
/// and its groups' GS06s. Nothing when the head is not an ISA.
pub fn numbers_of(head: &[u8], tail: &[u8], whole: bool) -> Vec<Sent> {
    let Some(isa) = head.get(..106).filter(|h| h.starts_with(b"ISA")) else {
        return Vec::new();
    };
    let (element, terminator) = (isa[3], isa[105]);
    let fields: Vec<&[u8]> = isa[..105].split(|b| *b == element).collect();
    let text = |f: Option<&&[u8]>| {
        String::from_utf8_lossy(f.copied().unwrap_or_default())
            .trim()
            .to_string()
    };
    let partner = format!("{}:{}", text(fields.get(7)), text(fields.get(8)));
    let number = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .filter(|n| (1..=MAX_CONTROL_NUMBER).contains(n))
    };
    let mut out = Vec::new();
    if let Some(n) = fields.get(13).and_then(|f| number(f)) {
        out.push((partner.clone(), Counter::Interchange, n));
    }
    let field = |segment: &[u8], id: &[u8], i: usize| -> Option<u32> {
        let segment = segment.trim_ascii_start();
        let mut parts = segment.split(|b| *b == element);
        (parts.next()? == id).then_some(())?;
        number(parts.nth(i - 1)?)
    };
    let body = head.get(106..).unwrap_or_default();
    let gs06: Vec<u32> = body
        .split(|b| *b == terminator)
        .filter_map(|s| field(s, b"GS", 6))
        .collect();
    if whole {
        out.extend(gs06.iter().map(|n| (partner.clone(), Counter::Group, *n)));
    } else if let Some(first) = gs06.first() {
        // The groups after the head: as many as IEA01 counts, numbered on from the first.
        let groups = tail
            .split(|b| *b == terminator)
            .rev()
            .find_map(|s| field(s, b"IEA", 1))
            .unwrap_or(1)
            .max(1);
        let last =
            (u64::from(*first) + u64::from(groups) - 1 - 1) % u64::from(MAX_CONTROL_NUMBER) + 1;
        out.push((
            partner.clone(),
            Counter::Group,
            u32::try_from(last).unwrap_or(*first),
        ));
    }
    out
}

/// Every number of every interchange file in `outbox` (hidden files and folders left out),
/// handed to `found`; how many files were read. Each file costs an open and at most two
/// small reads (its first [`HEAD`] and last 64 bytes), whatever its size: an outbox of
/// 100,000 acknowledgments costs `check` about 2 s from the page cache (docs/operations.md).
pub fn in_outbox(outbox: &Path, mut found: impl FnMut(Sent)) -> usize {
    let Ok(entries) = std::fs::read_dir(outbox) else {
        return 0;
    };
    let mut read = 0;
    for e in entries.flatten() {
        if e.file_name().as_encoded_bytes().starts_with(b".")
            || !e.file_type().is_ok_and(|t| t.is_file())
        {
            continue;
        }
        let Ok((head, tail, whole)) = head_and_tail(&e.path()) else {
            continue;
        };
        read += 1;
        for sent in numbers_of(&head, &tail, whole) {
            found(sent);
        }
    }
    read
}

fn head_and_tail(path: &Path) -> std::io::Result<(Vec<u8>, Vec<u8>, bool)> {
    let mut file = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(HEAD);
    (&mut file).take(HEAD as u64 + 1).read_to_end(&mut head)?;
    if head.len() <= HEAD {
        return Ok((head, Vec::new(), true));
    }
    head.truncate(HEAD);
    let mut tail = Vec::with_capacity(TAIL);
    file.seek(SeekFrom::End(-(TAIL as i64)))?;
    file.take(TAIL as u64).read_to_end(&mut tail)?;
    Ok((head, tail, false))
}

/// The highest number per partner and counter among `sent` (as `init` takes them).
pub fn highest(sent: impl IntoIterator<Item = Sent>) -> BTreeMap<String, (u32, u32)> {
    let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (partner, counter, n) in sent {
        let e = out.entry(partner).or_default();
        match counter {
            Counter::Interchange => e.0 = e.0.max(n),
            Counter::Group => e.1 = e.1.max(n),
        }
    }
    out
}

/// How far `sent` is ahead of a counter at `last` (none: nothing taken yet), counted around
/// the wrap from 999999999 to 1: `None` when it is not ahead (at or behind the counter, or
/// more than half the range ahead, which is a number from before the counter wrapped).
pub fn ahead_of(last: Option<u32>, sent: u32) -> Option<u32> {
    let max = i64::from(MAX_CONTROL_NUMBER);
    let d = (i64::from(sent) - i64::from(last.unwrap_or(0))).rem_euclid(max);
    (d > 0 && d < max / 2).then(|| u32::try_from(d).unwrap_or(0))
}

/// A counter the registry would hand out again: the partner, the counter, its last number
/// in the registry, and the highest number found sent (and where).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub partner: String,
    pub counter: Counter,
    pub registry: Option<u32>,
    pub sent: u32,
    pub found_in: &'static str,
}

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "our {} counter for {} {} but {} holds {:09} sent to it: the registry is older than what was sent (restored from a backup?), and the next acknowledgments would reuse numbers the partner has; `x12gate process --repair-counters FILES` (or `watch --repair-counters`) moves the counters past them",
            self.counter.name(),
            self.partner,
            self.registry
                .map_or("has not started".to_string(), |n| format!("is at {n:09}")),
            self.found_in,
            self.sent
        )
    }
}

/// The counters `registry` is behind on: compared with the outbox and with its own copies of
/// the acknowledgments it recorded.
pub fn behind(
    registry: &crate::registry::Registry,
    folders: &[std::path::PathBuf],
) -> Result<Vec<Behind>, crate::registry::RegistryError> {
    let counters = |registry: &crate::registry::Registry| {
        registry.control_numbers().map(|all| {
            all.into_iter()
                .map(|(p, c, n)| ((p, c), n))
                .collect::<BTreeMap<(String, Counter), u32>>()
        })
    };
    let before = counters(registry)?;
    // The number most ahead of its counter, per partner and counter.
    let mut worst: BTreeMap<(String, Counter), (u32, u32, &'static str)> = BTreeMap::new();
    let mut see = |(partner, counter, n): Sent, found_in: &'static str| {
        let key = (partner, counter);
        if let Some(d) = ahead_of(before.get(&key).copied(), n) {
            let e = worst.entry(key).or_insert((0, n, found_in));
            if d > e.0 {
                *e = (d, n, found_in);
            }
        }
    };
    for sent in registry
        .recorded_ack_heads(HEAD)?
        .iter()
        .flat_map(|h| numbers_of(h, b"", h.len() < HEAD))
    {
        see(sent, "the registry's own record of acknowledgments");
    }
    for (i, folder) in folders.iter().enumerate() {
        let found_in = if i == 0 {
            "the outbox"
        } else {
            "a partner's outbound folder"
        };
        in_outbox(folder, |sent| see(sent, found_in));
    }
    // A gateway running beside this check (another `process`, a node) takes numbers and
    // sends them meanwhile; a number is taken (its counter committed) before it is recorded
    // or placed, so the counters read now are at or past everything it sent while we read.
    let after = counters(registry)?;
    Ok(worst
        .into_iter()
        .filter(|(key, (_, n, _))| ahead_of(after.get(key).copied(), *n).is_some())
        .map(|((partner, counter), (_, sent, found_in))| Behind {
            registry: after.get(&(partner.clone(), counter)).copied(),
            partner,
            counter,
            sent,
            found_in,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISA: &str = "ISA*00*          *00*          *ZZ*X12GATE        *ZZ*ACME           *261129*2200*U*00401*000000031*0*P*>~";

    #[test]
    fn an_interchange_s_numbers_are_read_from_its_head_and_tail() {
        let whole = format!("{ISA}\nGS*FA*X12GATE*ACME*20261129*2200*7*X*004010~\nST*997*0001~\nSE*2*0001~\nGE*1*7~\nGS*FA*X12GATE*ACME*20261129*2200*8*X*005010~\nGE*0*8~\nIEA*2*000000031~\n");
        let acme = |c, n| ("ZZ:ACME".to_string(), c, n);
        assert_eq!(
            numbers_of(whole.as_bytes(), b"", true),
            [
                acme(Counter::Interchange, 31),
                acme(Counter::Group, 7),
                acme(Counter::Group, 8)
            ]
        );
        // A long one: the head's first GS06 and the tail's IEA01 groups, around the wrap.
        let head = format!("{ISA}GS*FA*X12GATE*ACME*20261129*2200*999999999*X*004010~ST*997");
        assert_eq!(
            numbers_of(
                head.as_bytes(),
                b"E*2*999999999~\nIEA*3*000000031~\n",
                false
            ),
            [acme(Counter::Interchange, 31), acme(Counter::Group, 2)]
        );
        assert!(numbers_of(b"not an interchange", b"", true).is_empty());
        assert!(numbers_of(&ISA.as_bytes()[..50], b"", true).is_empty());
    }

    #[test]
    fn ahead_counts_around_the_wrap() {
        assert_eq!(ahead_of(Some(21), 31), Some(10));
        assert_eq!(ahead_of(Some(31), 31), None);
        assert_eq!(ahead_of(Some(31), 21), None);
        assert_eq!(ahead_of(None, 1), Some(1));
        // A counter that wrapped is not behind the numbers from before the wrap...
        assert_eq!(ahead_of(Some(5), MAX_CONTROL_NUMBER - 3), None);
        // ...and one about to wrap is behind those after it.
        assert_eq!(ahead_of(Some(MAX_CONTROL_NUMBER - 1), 2), Some(3));
    }
}
