//! A deterministic generator of large, realistic interchanges, for benchmarks and load tests.
//!
//! The output looks like what a retailer and its suppliers exchange: interchanges in 004010 and
//! 005010, each with one or more functional groups of purchase orders (850), invoices (810) or
//! ship notices (856), with address loops, item lines, totals and the 856's shipment > order >
//! pack > item hierarchy. Every count and control number is right (SE01, GE01, IEA01, CTT01,
//! ST02/SE02, GS06/GE02, ISA13/IEA02), so the output validates with no findings and a benchmark
//! measures the clean path a production file takes.
//!
//! Two options shape the output for memory benchmarks: [`Options::small_sets`] writes one
//! interchange of a great many tiny purchase orders instead, and [`Options::to`] addresses
//! every interchange to one receiver, so a gateway configured with that id takes the file.
//!
//! The same seed, options and size always give the same bytes: the random source is a
//! SplitMix64 owned by this crate, so no external crate or platform detail can change a
//! benchmark's input between runs or machines.
//!
//! ```
//! let bytes = testdata::file(7, 64 * 1024);
//! assert!(bytes.len() >= 64 * 1024);
//! assert!(x12gate::check::file(&bytes, Default::default(), &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap())).is_empty());
//! ```

use std::fmt::{self, Display};
use std::io::{self, Write};

use x12gate::x12::Delimiters;

use crate::rng::Rng;
use crate::segments::SegmentWriter;

/// What follows each segment terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LineEnding {
    /// Segments run on one line, as most VANs send them.
    #[default]
    None,
    Lf,
    CrLf,
}

impl LineEnding {
    fn bytes(self) -> &'static [u8] {
        match self {
            LineEnding::None => b"",
            LineEnding::Lf => b"\n",
            LineEnding::CrLf => b"\r\n",
        }
    }
}

/// How the generated interchanges are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The delimiters every interchange declares. The repetition separator is used in 005010
    /// interchanges only (004010 ones send `U` in ISA11); `None` sends `U` in both. The data
    /// holds upper-case letters, digits, spaces, `.` and `-`, so none of those may be a delimiter.
    pub delimiters: Delimiters,
    /// Ignored when the segment terminator is itself a line feed.
    pub line_ending: LineEnding,
    /// Put everything in one interchange (of as many groups as it takes) instead of many
    /// interchanges of one to three groups: the worst case for memory, since a reader holds
    /// one interchange's tree at a time.
    pub one_interchange: bool,
    /// Address every interchange to this one receiver instead of drawing one from the
    /// partner table: ISA08 is this id (padded to 15), GS03 the partner table's application
    /// code when the id is one of its ISA ids, else the id itself. The sender is still drawn,
    /// and when it would be the receiver (same ISA id or same GS code) the next partner in the
    /// table sends instead. The receiver is drawn and then replaced, so the rest of the output
    /// draws what it would without this option. 1 to 15 upper-case letters, digits, spaces,
    /// `.` or `-`, neither beginning nor ending with a space (see [`Options::check`]).
    pub to: Option<String>,
    /// Write one 004010 interchange of tiny purchase orders (850: ST, BEG, REF, PER, one PO1
    /// and its PID, CTT, SE; about 180 bytes each) instead of realistic ones, in groups of at
    /// most [`SMALL_SETS_PER_GROUP`] sets: the worst case for per-set overhead. ST02 counts on
    /// across the groups, so every ST02 (and every BEG03) in the interchange is distinct.
    /// `one_interchange` is implied.
    pub small_sets: bool,
}

/// The most sets in one group of [`Options::small_sets`]: GE01 has at most six digits, and a
/// round number keeps the groups easy to check by eye.
pub const SMALL_SETS_PER_GROUP: u64 = 100_000;

impl Options {
    /// Why these options cannot be written, if they cannot: a `to` that does not fit ISA08 and
    /// GS03 or holds a character that could be a delimiter.
    pub fn check(&self) -> Result<(), String> {
        let Some(to) = &self.to else {
            return Ok(());
        };
        let allowed = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit() || b" .-".contains(&b);
        if to.is_empty()
            || to.len() > 15
            || !to.bytes().all(allowed)
            || to.starts_with(' ')
            || to.ends_with(' ')
        {
            return Err(format!(
                "receiver id {to:?}: expected 1 to 15 upper-case letters, digits, spaces, `.` or `-`, not beginning or ending with a space"
            ));
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            delimiters: Delimiters::COMMON,
            line_ending: LineEnding::None,
            one_interchange: false,
            to: None,
            small_sets: false,
        }
    }
}

/// Writes realistic interchanges; see the module documentation.
#[derive(Debug, Clone)]
pub struct Generator {
    rng: Rng,
    options: Options,
    /// The next ISA13 and GS06; ST02 restarts at 0001 in each group.
    next_interchange: u32,
    next_group: u32,
    /// The next purchase order, invoice and shipment number, so documents refer to each other.
    next_document: u64,
    /// [`SMALL_SETS_PER_GROUP`], smaller in tests.
    sets_per_group: u64,
}

impl Generator {
    pub fn new(seed: u64) -> Self {
        Generator::with_options(seed, Options::default())
    }

    pub fn with_options(seed: u64, options: Options) -> Self {
        let mut rng = Rng::new(seed);
        let next_interchange = 1 + rng.below(900_000) as u32;
        let next_document = 4_500_000_000 + rng.below(10_000_000);
        Generator {
            rng,
            options,
            next_interchange,
            next_group: 1,
            next_document,
            sets_per_group: SMALL_SETS_PER_GROUP,
        }
    }

    /// Writes whole interchanges until at least `target_bytes` are written (and always at least
    /// one interchange); returns the number of bytes written. The last interchange is cut short
    /// at a set boundary, so the output overshoots the target by at most one transaction set
    /// and its trailers. Output goes out in blocks of about a megabyte, whatever the size.
    /// Options that fail [`Options::check`] are an `InvalidInput` error, before any output.
    pub fn write_to<W: Write>(&mut self, out: &mut W, target_bytes: u64) -> io::Result<u64> {
        self.options
            .check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let d = self.options.delimiters;
        let line_ending = if d.segment == b'\n' {
            LineEnding::None
        } else {
            self.options.line_ending
        };
        let mut w = SegmentWriter::new(d, line_ending.bytes(), 2 * FLUSH_AT);
        loop {
            if self.options.small_sets {
                self.small_sets(&mut w, out, target_bytes)?;
            } else {
                self.interchange(&mut w, out, target_bytes)?;
            }
            if w.written() >= target_bytes {
                w.flush_to(out)?;
                return Ok(w.flushed());
            }
        }
    }

    /// The ISA of a new interchange, from its sender, receiver, date and time drawn here (in
    /// this order, which fixes the bytes of every seed), and its control number.
    fn open_interchange(&mut self, w: &mut SegmentWriter<'_>, v5010: bool) -> Envelope {
        let d = w.delimiters();
        let sender = self.rng.below(PARTNERS.len() as u64) as usize;
        // Any other partner: an offset of 1..len-1 never comes back to the sender.
        let receiver =
            (sender + 1 + self.rng.below(PARTNERS.len() as u64 - 1) as usize) % PARTNERS.len();
        let (mut sender, mut receiver) = (sender, (PARTNERS[receiver].0, PARTNERS[receiver].1));
        if let Some(to) = &self.options.to {
            let gs03 = PARTNERS
                .iter()
                .find(|p| p.0 == to)
                .map_or(to.as_str(), |p| p.1);
            // Only one partner can clash: the one whose ISA id is `to` (then its GS code is
            // `gs03`), or else the one whose GS code is `to`; the next one never does.
            if PARTNERS[sender].0 == to || PARTNERS[sender].1 == gs03 {
                sender = (sender + 1) % PARTNERS.len();
            }
            receiver = (to.as_str(), gs03);
        }
        let sender = PARTNERS[sender];
        let receiver = (receiver.0.to_string(), receiver.1.to_string());
        let date = Date::random(&mut self.rng);
        let time = self.rng.below(24 * 60);
        let (hh, mm) = (time / 60, time % 60);
        let control = self.next_interchange;
        self.next_interchange = self.next_interchange % 999_999_999 + 1;
        let (isa11, isa12) = match d.repetition {
            Some(r) if v5010 => (r, "00501"),
            _ if v5010 => (b'U', "00501"),
            _ => (b'U', "00401"),
        };
        // The ISA is fixed width (ids padded to 15), so it is assembled field by field.
        let isa: [Vec<u8>; 16] = [
            b"00".to_vec(),
            vec![b' '; 10],
            b"00".to_vec(),
            vec![b' '; 10],
            b"ZZ".to_vec(),
            format!("{:<15}", sender.0).into_bytes(),
            b"ZZ".to_vec(),
            format!("{:<15}", receiver.0).into_bytes(),
            format!("{:02}{:02}{:02}", date.year % 100, date.month, date.day).into_bytes(),
            format!("{hh:02}{mm:02}").into_bytes(),
            vec![isa11],
            isa12.as_bytes().to_vec(),
            format!("{control:09}").into_bytes(),
            b"0".to_vec(),
            b"P".to_vec(),
            vec![d.component],
        ];
        w.raw("ISA", &isa);
        Envelope {
            sender,
            receiver,
            date,
            time: format!("{hh:02}{mm:02}"),
            control,
            gs08: if v5010 { "005010" } else { "004010" },
        }
    }

    /// The GS of a new group; returns its control number (GS06).
    fn open_group(&mut self, w: &mut SegmentWriter<'_>, e: &Envelope, functional_id: &str) -> u32 {
        let gs06 = self.next_group;
        self.next_group = self.next_group % 999_999_999 + 1;
        w.segment(
            "GS",
            &[
                &functional_id,
                &e.sender.1,
                &e.receiver.1,
                &e.date,
                &e.time,
                &gs06,
                &"X",
                &e.gs08,
            ],
        );
        gs06
    }

    /// One interchange, with sets added until the output holds `target_bytes`.
    fn interchange(
        &mut self,
        w: &mut SegmentWriter<'_>,
        out: &mut dyn Write,
        target_bytes: u64,
    ) -> io::Result<()> {
        let v5010 = self.rng.one_in(2);
        let e = self.open_interchange(w, v5010);
        let date = e.date;
        let control = e.control;

        let groups = if self.options.one_interchange {
            u64::MAX
        } else {
            self.rng.range(1, 3)
        };
        let mut written_groups = 0;
        for _ in 0..groups {
            let kind = *self.rng.pick(&[
                DocumentKind::Order,
                DocumentKind::Order,
                DocumentKind::Invoice,
                DocumentKind::Ship,
            ]);
            let gs06 = self.open_group(w, &e, kind.functional_id());
            written_groups += 1;
            let sets = self.rng.range(1, 25);
            let mut written_sets = 0;
            for st02 in 1..=sets {
                w.reset_count();
                let st02 = format!("{st02:04}");
                match kind {
                    DocumentKind::Order => w.segment("ST", &[&"850", &st02]),
                    DocumentKind::Invoice => w.segment("ST", &[&"810", &st02]),
                    DocumentKind::Ship => w.segment("ST", &[&"856", &st02]),
                }
                match kind {
                    DocumentKind::Order => self.order(w, date),
                    DocumentKind::Invoice => self.invoice(w, date),
                    DocumentKind::Ship => self.ship_notice(w, date),
                }
                let se01 = w.count() + 1;
                w.segment("SE", &[&se01, &st02]);
                written_sets += 1;
                if w.buffered() >= FLUSH_AT {
                    w.flush_to(out)?;
                }
                if w.written() >= target_bytes {
                    break;
                }
            }
            w.segment("GE", &[&written_sets, &gs06]);
            if w.written() >= target_bytes {
                break;
            }
        }
        w.segment("IEA", &[&written_groups, &format_args!("{control:09}")]);
        Ok(())
    }

    /// One 004010 interchange of [`Generator::small_order`]s until the output holds
    /// `target_bytes` (at least one set), [`SMALL_SETS_PER_GROUP`] sets to a group.
    fn small_sets(
        &mut self,
        w: &mut SegmentWriter<'_>,
        out: &mut dyn Write,
        target_bytes: u64,
    ) -> io::Result<()> {
        let e = self.open_interchange(w, false);
        let mut groups = 0u64;
        // ST02 is AN 4..9: it counts on across groups, wrapping after nine digits (180 GB).
        let mut st02 = 0u32;
        loop {
            let gs06 = self.open_group(w, &e, "PO");
            groups += 1;
            let mut sets = 0u64;
            loop {
                st02 = st02 % 999_999_999 + 1;
                self.small_order(w, &format!("{st02:04}"), e.date);
                sets += 1;
                if w.buffered() >= FLUSH_AT {
                    w.flush_to(out)?;
                }
                if sets == self.sets_per_group || w.written() >= target_bytes {
                    break;
                }
            }
            w.segment("GE", &[&sets, &gs06]);
            if w.written() >= target_bytes {
                break;
            }
        }
        w.segment("IEA", &[&groups, &format_args!("{:09}", e.control)]);
        Ok(())
    }

    /// A tiny 850, ST to SE: BEG, REF, PER, one PO1 with its PID, CTT.
    fn small_order(&mut self, w: &mut SegmentWriter<'_>, st02: &str, date: Date) {
        w.reset_count();
        w.segment("ST", &[&"850", &st02]);
        let po = self.document_number();
        w.segment("BEG", &[&"00", &"SA", &po, &"", &date]);
        w.segment(
            "REF",
            &[&"DP", &format_args!("{:03}", self.rng.below(1000))],
        );
        let buyer = *self.rng.pick(BUYERS);
        w.segment(
            "PER",
            &[
                &"BD",
                &buyer,
                &"TE",
                &format_args!("555{:07}", self.rng.below(10_000_000)),
            ],
        );
        let it = self.item();
        item_line(w, "PO1", 1, &it);
        w.segment("CTT", &[&1, &it.quantity]);
        let se01 = w.count() + 1;
        w.segment("SE", &[&se01, &st02]);
    }

    /// Line items per document: mostly a few dozen, now and then a store-wide order of hundreds.
    fn line_count(&mut self) -> u64 {
        if self.rng.one_in(20) {
            self.rng.range(100, 600)
        } else {
            self.rng.range(1, 40)
        }
    }

    fn document_number(&mut self) -> u64 {
        self.next_document += 1 + self.rng.below(3);
        self.next_document
    }

    fn party(&mut self, w: &mut SegmentWriter<'_>, qualifier: &str) {
        let name = *self.rng.pick(COMPANIES);
        let store = self.rng.range(1, 9999);
        let (city, state, zip) = *self.rng.pick(CITIES);
        let number = self.rng.range(1, 9999);
        let street = *self.rng.pick(STREETS);
        w.segment(
            "N1",
            &[&qualifier, &name, &"92", &format_args!("{store:04}")],
        );
        w.segment("N3", &[&format_args!("{number} {street}")]);
        w.segment("N4", &[&city, &state, &zip, &"US"]);
    }

    /// An item: a random product with a valid UPC, a vendor part number and a unit price.
    fn item(&mut self) -> LineItem {
        let upc = Upc(self.rng.below(100_000_000_000));
        let (description, unit, price_range) = *self.rng.pick(PRODUCTS);
        LineItem {
            upc,
            vendor_part: format!(
                "{}-{:05}",
                *self.rng.pick(&["AB", "KX", "TR", "MN", "QP"]),
                self.rng.below(100_000)
            ),
            description,
            unit,
            price: Money(self.rng.range(price_range.0, price_range.1)),
            quantity: if self.rng.one_in(4) {
                self.rng.range(1, 500)
            } else {
                self.rng.range(1, 48)
            },
        }
    }

    /// 850: BEG, CUR, REF, PER, FOB, ITD, DTM, N1 loops, PO1 + PID (+ PO4) lines, CTT, AMT.
    fn order(&mut self, w: &mut SegmentWriter<'_>, date: Date) {
        let po = self.document_number();
        w.segment("BEG", &[&"00", &"SA", &po, &"", &date]);
        w.segment("CUR", &[&"BY", &"USD"]);
        w.segment(
            "REF",
            &[&"DP", &format_args!("{:03}", self.rng.below(1000))],
        );
        w.segment("REF", &[&"IA", &self.rng.range(100_000, 999_999)]);
        let buyer = *self.rng.pick(BUYERS);
        w.segment(
            "PER",
            &[
                &"BD",
                &buyer,
                &"TE",
                &format_args!("555{:07}", self.rng.below(10_000_000)),
            ],
        );
        w.segment("FOB", &[&"PP"]);
        w.segment("ITD", &[&"01", &"3", &"2", &"", &"10", &"", &"30"]);
        w.segment("DTM", &[&"002", &date.plus_days(self.rng.range(3, 30))]);
        self.party(w, "ST");
        self.party(w, "BT");
        let lines = self.line_count();
        let mut hash = 0u64;
        let mut total = 0u64;
        for n in 1..=lines {
            let it = self.item();
            hash += it.quantity;
            total += it.quantity * it.price.0;
            item_line(w, "PO1", n, &it);
            if self.rng.one_in(3) {
                w.segment(
                    "PO4",
                    &[
                        &self.rng.range(1, 24),
                        &"",
                        &"",
                        &"",
                        &"G",
                        &Weight(self.rng.range(5, 5000)),
                        &"LB",
                    ],
                );
            }
        }
        w.segment("CTT", &[&lines, &hash]);
        w.segment("AMT", &[&"TT", &Money(total)]);
    }

    /// 810: BIG, REF, N1 loops, ITD, DTM, IT1 + PID lines, TDS, CAD, ISS, CTT.
    fn invoice(&mut self, w: &mut SegmentWriter<'_>, date: Date) {
        let invoice = self.document_number();
        let po = invoice.saturating_sub(self.rng.range(1, 5000));
        w.segment(
            "BIG",
            &[
                &date,
                &format_args!("INV{invoice}"),
                &date.plus_days_back(7),
                &po,
            ],
        );
        w.segment("REF", &[&"IA", &self.rng.range(100_000, 999_999)]);
        w.segment(
            "REF",
            &[&"DP", &format_args!("{:03}", self.rng.below(1000))],
        );
        self.party(w, "RE");
        self.party(w, "ST");
        w.segment("ITD", &[&"01", &"3", &"2", &"", &"10", &"", &"30"]);
        w.segment("DTM", &[&"011", &date]);
        let lines = self.line_count();
        let mut total = 0u64;
        let mut cartons = 0u64;
        for n in 1..=lines {
            let it = self.item();
            total += it.quantity * it.price.0;
            cartons += it.quantity.div_ceil(12);
            item_line(w, "IT1", n, &it);
        }
        // TDS01 is an N2: the amount in cents, no decimal point.
        w.segment("TDS", &[&total]);
        let (scac, carrier) = *self.rng.pick(CARRIERS);
        w.segment("CAD", &[&"M", &"", &"", &scac, &carrier]);
        w.segment("ISS", &[&cartons, &"CT"]);
        w.segment("CTT", &[&lines]);
    }

    /// 856: BSN, then HL shipment (TD1, TD5, REF, DTM, N1 loops) > order (PRF) > pack (MAN) >
    /// item (LIN, SN1, PID), CTT counting the HL segments.
    fn ship_notice(&mut self, w: &mut SegmentWriter<'_>, date: Date) {
        let shipment = self.document_number();
        let time = self.rng.below(24 * 60);
        w.segment(
            "BSN",
            &[
                &"00",
                &format_args!("SH{shipment}"),
                &date,
                &format_args!("{:02}{:02}", time / 60, time % 60),
                &"0001",
            ],
        );
        let orders = if self.rng.one_in(4) {
            self.rng.range(2, 5)
        } else {
            1
        };
        let items_per_order = (self.line_count() / orders).max(1);
        let mut hl = 1u64;
        w.segment("HL", &[&hl, &"", &"S"]);
        let packs_total = orders * items_per_order.div_ceil(4);
        w.segment(
            "TD1",
            &[
                &"CTN25",
                &packs_total,
                &"",
                &"",
                &"",
                &"G",
                &Weight(self.rng.range(100, 50_000)),
                &"LB",
            ],
        );
        let (scac, carrier) = *self.rng.pick(CARRIERS);
        w.segment("TD5", &[&"B", &"2", &scac, &"M", &carrier]);
        w.segment(
            "REF",
            &[
                &"BM",
                &format_args!("{scac}{:010}", self.rng.below(10_000_000_000)),
            ],
        );
        w.segment("DTM", &[&"011", &date]);
        w.segment("DTM", &[&"017", &date.plus_days(self.rng.range(1, 6))]);
        self.party(w, "ST");
        self.party(w, "SF");
        let shipment_hl = hl;
        for _ in 0..orders {
            hl += 1;
            let order_hl = hl;
            w.segment("HL", &[&order_hl, &shipment_hl, &"O"]);
            let po = shipment.saturating_sub(self.rng.range(1, 5000));
            w.segment("PRF", &[&po, &"", &"", &date.plus_days_back(10)]);
            let mut left = items_per_order;
            while left > 0 {
                hl += 1;
                let pack_hl = hl;
                w.segment("HL", &[&pack_hl, &order_hl, &"P"]);
                w.segment("MAN", &[&"GM", &Sscc(self.rng.below(1_000_000_000))]);
                for _ in 0..left.min(4) {
                    hl += 1;
                    let it = self.item();
                    w.segment("HL", &[&hl, &pack_hl, &"I"]);
                    w.segment("LIN", &[&"", &"UP", &it.upc, &"VN", &it.vendor_part]);
                    w.segment("SN1", &[&"", &it.quantity, &it.unit]);
                    w.segment("PID", &[&"F", &"", &"", &"", &it.description]);
                }
                left = left.saturating_sub(4);
            }
        }
        w.segment("CTT", &[&hl]);
    }
}

/// An item line (PO1 of an 850, IT1 of an 810: the same elements) and the item's PID.
fn item_line(w: &mut SegmentWriter<'_>, id: &str, n: u64, it: &LineItem) {
    w.segment(
        id,
        &[
            &n,
            &it.quantity,
            &it.unit,
            &it.price,
            &"",
            &"UP",
            &it.upc,
            &"VN",
            &it.vendor_part,
        ],
    );
    w.segment("PID", &[&"F", &"", &"", &"", &it.description]);
}

/// What every group of an interchange repeats from its ISA.
struct Envelope {
    /// ISA id and GS application code of each side.
    sender: (&'static str, &'static str),
    receiver: (String, String),
    date: Date,
    /// HHMM.
    time: String,
    control: u32,
    /// The version, as GS08 names it.
    gs08: &'static str,
}

/// A file of about `target_bytes` (never less) from `seed`, with the default options.
pub fn file(seed: u64, target_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target_bytes.saturating_add(256 * 1024));
    // invariant: writing to a Vec cannot fail.
    let _ = Generator::new(seed).write_to(&mut out, target_bytes as u64);
    out
}

#[derive(Debug, Clone, Copy)]
enum DocumentKind {
    Order,
    Invoice,
    Ship,
}

impl DocumentKind {
    fn functional_id(self) -> &'static str {
        match self {
            DocumentKind::Order => "PO",
            DocumentKind::Invoice => "IN",
            DocumentKind::Ship => "SH",
        }
    }
}

/// How much output is gathered before it is written out.
const FLUSH_AT: usize = 1 << 20;

struct LineItem {
    upc: Upc,
    vendor_part: String,
    description: &'static str,
    unit: &'static str,
    price: Money,
    quantity: u64,
}

/// An amount in cents, shown as an X12 decimal (`12.50`).
#[derive(Debug, Clone, Copy)]
struct Money(u64);

impl Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

/// A weight in tenths of a pound, shown as a decimal (`45.5`).
#[derive(Debug, Clone, Copy)]
struct Weight(u64);

impl Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 10, self.0 % 10)
    }
}

/// A UPC-A: eleven digits and the check digit computed from them.
#[derive(Debug, Clone, Copy)]
struct Upc(u64);

impl Display for Upc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = format!("{:011}", self.0);
        write!(f, "{digits}{}", gs1_check_digit(&digits))
    }
}

/// An SSCC-18 carton label: extension digit 0, a company prefix, a serial and the check digit.
#[derive(Debug, Clone, Copy)]
struct Sscc(u64);

impl Display for Sscc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = format!("00614141{:09}", self.0);
        write!(f, "{digits}{}", gs1_check_digit(&digits))
    }
}

/// The GS1 mod-10 check digit: weights 3 and 1 alternating from the rightmost digit.
fn gs1_check_digit(digits: &str) -> u32 {
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| u32::from(b - b'0') * if i % 2 == 0 { 3 } else { 1 })
        .sum();
    (10 - sum % 10) % 10
}

/// A calendar date, shown as CCYYMMDD. Days stop at 28 so every month is valid.
#[derive(Debug, Clone, Copy)]
struct Date {
    year: u32,
    month: u32,
    day: u32,
}

impl Date {
    fn random(rng: &mut Rng) -> Date {
        Date {
            year: 2023 + rng.below(3) as u32,
            month: 1 + rng.below(12) as u32,
            day: 1 + rng.below(28) as u32,
        }
    }

    fn plus_days_back(self, days: u64) -> Date {
        self.shifted(-(days as i64))
    }

    fn plus_days(self, days: u64) -> Date {
        self.shifted(days as i64)
    }

    /// A date `days` away, in a 28-day-month calendar that is good enough for test data.
    fn shifted(self, days: i64) -> Date {
        let index =
            i64::from(self.year) * 336 + i64::from(self.month - 1) * 28 + i64::from(self.day - 1);
        let index = index + days;
        Date {
            year: (index / 336) as u32,
            month: (index % 336 / 28) as u32 + 1,
            day: (index % 28) as u32 + 1,
        }
    }
}

impl Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}{:02}{:02}", self.year, self.month, self.day)
    }
}

/// Trading partners: the ISA id (padded to 15 in the ISA) and the GS application code.
const PARTNERS: &[(&str, &str)] = &[
    ("ACMERETAIL", "ACMERET"),
    ("6123456789", "BIGBOX"),
    ("GLOBEXSUPPLY", "GLOBEX"),
    ("INITECHDIST", "INITECH"),
    ("0614141000005", "UMBRELLA"),
    ("HOOLIWHSE", "HOOLI"),
    ("STARKGOODS", "STARK"),
    ("WAYNEFOODS", "WAYNE"),
];

const COMPANIES: &[&str] = &[
    "ACME RETAIL STORE",
    "BIG BOX DC",
    "GLOBEX SUPPLY CO",
    "INITECH DISTRIBUTION",
    "UMBRELLA HOME GOODS",
    "HOOLI WAREHOUSE",
    "STARK GENERAL MERCHANDISE",
    "WAYNE FINE FOODS",
];

const STREETS: &[&str] = &[
    "MAIN ST",
    "INDUSTRIAL PKWY",
    "COMMERCE DR",
    "LOGISTICS BLVD",
    "HARBOR RD",
    "ELM AVE",
    "DISTRIBUTION WAY",
];

const CITIES: &[(&str, &str, &str)] = &[
    ("SPRINGFIELD", "IL", "62701"),
    ("COLUMBUS", "OH", "43215"),
    ("RENO", "NV", "89502"),
    ("ALLENTOWN", "PA", "18101"),
    ("MEMPHIS", "TN", "38118"),
    ("ONTARIO", "CA", "91761"),
    ("SAVANNAH", "GA", "31408"),
    ("DALLAS", "TX", "75261"),
];

const BUYERS: &[&str] = &[
    "JANE DOE",
    "RAVI PATEL",
    "MARIA GARCIA",
    "CHEN WEI",
    "SAM OKAFOR",
];

/// SCAC and carrier name.
const CARRIERS: &[(&str, &str)] = &[
    ("UPSN", "UPS GROUND"),
    ("FDEG", "FEDEX GROUND"),
    ("ODFL", "OLD DOMINION"),
    ("RDWY", "YRC FREIGHT"),
    ("SCNN", "SCHNEIDER NATIONAL"),
];

/// Description, unit of measure, and the unit price range in cents.
const PRODUCTS: &[(&str, &str, (u64, u64))] = &[
    ("COTTON T-SHIRT CREW NECK", "EA", (299, 1299)),
    ("STAINLESS TRAVEL MUG 16OZ", "EA", (499, 2499)),
    ("AA ALKALINE BATTERIES 24PK", "PK", (899, 1999)),
    ("ORGANIC COFFEE BEANS 2LB", "EA", (1099, 2499)),
    ("LED BULB 60W EQUIV 4PK", "PK", (599, 1499)),
    ("KIDS RAIN BOOTS", "PR", (1299, 2999)),
    ("PAPER TOWELS 12 ROLL", "CA", (1199, 2299)),
    ("WIRELESS EARBUDS", "EA", (1999, 9999)),
    ("DOG FOOD CHICKEN 30LB", "BG", (2499, 5499)),
    ("BATH TOWEL SET 6PC", "ST", (1999, 4999)),
    ("SPARKLING WATER 12CT", "CA", (399, 899)),
    ("CAST IRON SKILLET 12IN", "EA", (1499, 3999)),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use x12gate::x12::{Interchanges, Limits};

    /// The findings of `bytes` against the built-in definitions.
    fn findings_of(bytes: &[u8]) -> Vec<x12gate::finding::Finding> {
        let schemas = x12gate::schema::builtin().unwrap();
        x12gate::check::file(
            bytes,
            Limits::default(),
            &x12gate::check::Checks::definitions(schemas),
        )
    }

    fn render(findings: &[impl Display]) -> String {
        findings.iter().take(5).map(|f| format!("{f}\n")).collect()
    }

    #[test]
    fn same_seed_same_bytes() {
        assert_eq!(file(42, 300_000), file(42, 300_000));
        assert_ne!(file(42, 300_000), file(43, 300_000));
    }

    #[test]
    fn several_sizes_validate_clean() {
        for (seed, size) in [(1, 0), (2, 1_000), (3, 50_000), (4, 2_000_000)] {
            let bytes = file(seed, size);
            assert!(bytes.len() >= size);
            let findings = findings_of(&bytes);
            assert!(findings.is_empty(), "seed {seed}: {}", render(&findings));
        }
    }

    #[test]
    fn all_three_sets_both_versions_and_counts() {
        let bytes = file(9, 3_000_000);
        let mut kinds = std::collections::BTreeSet::new();
        let mut versions = std::collections::BTreeSet::new();
        for ic in Interchanges::new(&bytes, Limits::default()) {
            let ic = ic.unwrap();
            versions.insert(ic.isa.version().to_string());
            for g in &ic.groups {
                for s in &g.sets {
                    kinds.insert(s.st.text(1).to_string());
                    // CTT01 counts the item lines (850, 810) or the HL segments (856).
                    let counted: &[u8] = match s.st.text(1) {
                        "850" => b"PO1",
                        "810" => b"IT1",
                        _ => b"HL",
                    };
                    let n = s.body.segments().filter(|x| x.id == counted).count();
                    let ctt = s.body.segments().find(|x| x.is(b"CTT")).unwrap();
                    assert_eq!(ctt.text(1), n.to_string());
                }
            }
        }
        assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["810", "850", "856"]);
        assert_eq!(versions.into_iter().collect::<Vec<_>>(), ["00401", "00501"]);
    }

    #[test]
    fn other_delimiters_and_line_endings_validate_clean() {
        let cases = [
            (
                Delimiters {
                    element: b'|',
                    component: b'>',
                    repetition: Some(b'{'),
                    segment: b'\n',
                },
                LineEnding::CrLf,
            ),
            (
                Delimiters {
                    element: b'*',
                    component: b':',
                    repetition: None,
                    segment: b'~',
                },
                LineEnding::CrLf,
            ),
            (Delimiters::COMMON, LineEnding::Lf),
        ];
        for (delimiters, line_ending) in cases {
            let mut out = Vec::new();
            let options = Options {
                delimiters,
                line_ending,
                ..Options::default()
            };
            Generator::with_options(5, options)
                .write_to(&mut out, 200_000)
                .unwrap();
            let findings = findings_of(&out);
            assert!(findings.is_empty(), "{delimiters:?}: {}", render(&findings));
            let ic = Interchanges::new(&out, Limits::default())
                .next()
                .unwrap()
                .unwrap();
            assert_eq!(ic.delimiters().element, delimiters.element);
        }
    }

    #[test]
    fn one_interchange_of_many_groups() {
        let options = Options {
            one_interchange: true,
            ..Options::default()
        };
        let mut out = Vec::new();
        let written = Generator::with_options(6, options)
            .write_to(&mut out, 3_000_000)
            .unwrap();
        assert_eq!(written, out.len() as u64);
        let all: Vec<_> = Interchanges::new(&out, Limits::default()).collect();
        assert_eq!(all.len(), 1);
        assert!(all[0].as_ref().unwrap().groups.len() > 10);
        let findings = findings_of(&out);
        assert!(findings.is_empty(), "{}", render(&findings));
    }

    #[test]
    fn streams_in_blocks_and_matches_file() {
        /// Counts the writes it receives.
        struct Counting(Vec<u8>, usize);
        impl Write for Counting {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.1 += 1;
                self.0.write(b)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut out = Counting(Vec::new(), 0);
        Generator::new(8).write_to(&mut out, 5_000_000).unwrap();
        assert!(out.1 >= 4, "{} writes", out.1);
        assert_eq!(out.0, file(8, 5_000_000));
    }

    /// The segments of `bytes` (common delimiters), each split into its elements.
    fn segments(bytes: &[u8]) -> Vec<Vec<&str>> {
        std::str::from_utf8(bytes)
            .unwrap()
            .split_terminator('~')
            .map(|s| s.split('*').collect())
            .collect()
    }

    fn options_to(to: &str) -> Options {
        Options {
            to: Some(to.to_string()),
            ..Options::default()
        }
    }

    #[test]
    fn to_addresses_every_interchange_and_changes_nothing_else() {
        let plain = file(11, 1_000_000);
        for (to, gs03) in [("6123456789", "BIGBOX"), ("X12GATE", "X12GATE")] {
            let mut out = Vec::new();
            Generator::with_options(11, options_to(to))
                .write_to(&mut out, 1_000_000)
                .unwrap();
            let mut again = Vec::new();
            Generator::with_options(11, options_to(to))
                .write_to(&mut again, 1_000_000)
                .unwrap();
            assert_eq!(out, again);
            let segs = segments(&out);
            let isas: Vec<_> = segs.iter().filter(|s| s[0] == "ISA").collect();
            assert!(isas.len() > 5, "{} interchanges", isas.len());
            for isa in &isas {
                assert_eq!(isa[8], format!("{to:<15}"));
                assert_ne!(isa[6].trim_end(), to);
            }
            for gs in segs.iter().filter(|s| s[0] == "GS") {
                assert_eq!(gs[3], gs03);
                assert_ne!(gs[2], gs03);
            }
            // The receiver is drawn and replaced: everything but the addresses is as before.
            let rest = |segs: Vec<Vec<&str>>| -> Vec<String> {
                segs.into_iter()
                    .filter(|s| s[0] != "ISA" && s[0] != "GS")
                    .map(|s| s.join("*"))
                    .collect()
            };
            assert_eq!(rest(segs), rest(segments(&plain)));
            let findings = findings_of(&out);
            assert!(findings.is_empty(), "{to}: {}", render(&findings));
        }
    }

    #[test]
    fn to_a_sender_picks_the_next_partner() {
        // Every partner of the table as the receiver: no interchange is sent to itself.
        for (id, gs) in PARTNERS {
            let mut out = Vec::new();
            Generator::with_options(12, options_to(id))
                .write_to(&mut out, 200_000)
                .unwrap();
            let segs = segments(&out);
            for isa in segs.iter().filter(|s| s[0] == "ISA") {
                assert_eq!(isa[8].trim_end(), *id);
                assert_ne!(isa[6].trim_end(), *id);
            }
            for g in segs.iter().filter(|s| s[0] == "GS") {
                assert_eq!((g[3], g[2] != *gs), (*gs, true));
            }
        }
    }

    #[test]
    fn a_receiver_that_does_not_fit_is_refused() {
        for to in ["", "x12gate", "SIXTEEN CHARS ID", " LEAD", "A*B", "A~B"] {
            let e = Generator::with_options(1, options_to(to))
                .write_to(&mut Vec::new(), 1_000)
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{to:?}");
        }
        assert!(options_to("0614141000005").check().is_ok());
    }

    /// Checks the counts of one small-sets interchange and returns its group sizes.
    fn small_sets_counts(bytes: &[u8]) -> Vec<u64> {
        let segs = segments(bytes);
        assert_eq!(segs.iter().filter(|s| s[0] == "ISA").count(), 1);
        let (mut groups, mut sets, mut in_set) = (Vec::new(), 0u64, 0u64);
        let (mut st02s, mut beg03s) = (BTreeSet::new(), BTreeSet::new());
        for s in &segs {
            in_set += 1;
            match s[0] {
                "GS" => sets = 0,
                "ST" => {
                    assert_eq!(s[1], "850");
                    assert!(st02s.insert(s[2]), "ST02 {} twice", s[2]);
                    in_set = 1;
                }
                "BEG" => assert!(beg03s.insert(s[3]), "BEG03 {} twice", s[3]),
                "SE" => {
                    assert_eq!(s[1], in_set.to_string());
                    assert_eq!(in_set, 8);
                    sets += 1;
                }
                "GE" => {
                    assert_eq!(s[1], sets.to_string());
                    groups.push(sets);
                }
                "IEA" => assert_eq!(s[1], groups.len().to_string()),
                _ => {}
            }
        }
        assert_eq!(segs.last().unwrap()[0], "IEA");
        groups
    }

    #[test]
    fn small_sets_are_one_clean_interchange_in_full_groups() {
        let options = Options {
            small_sets: true,
            to: Some("6123456789".to_string()),
            ..Options::default()
        };
        let write = |sets_per_group| {
            let mut g = Generator::with_options(13, options.clone());
            g.sets_per_group = sets_per_group;
            let mut out = Vec::new();
            let written = g.write_to(&mut out, 200_000).unwrap();
            assert_eq!(written, out.len() as u64);
            out
        };
        let out = write(300);
        assert_eq!(out, write(300));
        let groups = small_sets_counts(&out);
        let sets: u64 = groups.iter().sum();
        // About 180 bytes a set.
        assert!((1_000..1_200).contains(&sets), "{sets} sets");
        assert!(groups[..groups.len() - 1].iter().all(|n| *n == 300));
        assert!((1..=300).contains(groups.last().unwrap()));
        let findings = findings_of(&out);
        assert!(findings.is_empty(), "{}", render(&findings));
        let ic = Interchanges::new(&out, Limits::default())
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(ic.isa.version(), "00401");
        // Nothing asked for: still one set, one group.
        let mut tiny = Vec::new();
        Generator::with_options(13, options.clone())
            .write_to(&mut tiny, 0)
            .unwrap();
        assert_eq!(small_sets_counts(&tiny), [1]);
    }

    #[test]
    fn small_sets_groups_hold_at_most_100_000() {
        let options = Options {
            small_sets: true,
            ..Options::default()
        };
        let mut out = Vec::new();
        // About 110,000 sets: one full group and a part.
        Generator::with_options(14, options)
            .write_to(&mut out, 20_000_000)
            .unwrap();
        let groups = small_sets_counts(&out);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0], SMALL_SETS_PER_GROUP);
        assert!(groups[1] < SMALL_SETS_PER_GROUP);
    }

    #[test]
    fn upc_check_digit() {
        // The GS1 example: 03600029145 -> 036000291452.
        assert_eq!(Upc(3_600_029_145).to_string(), "036000291452");
    }
}
