//! A deterministic generator of large, realistic interchanges, for benchmarks and load tests.
//!
//! The output looks like what a retailer and its suppliers exchange: interchanges in 004010 and
//! 005010, each with one or more functional groups of purchase orders (850), invoices (810) or
//! ship notices (856), with address loops, item lines, totals and the 856's shipment > order >
//! pack > item hierarchy. Every count and control number is right (SE01, GE01, IEA01, CTT01,
//! ST02/SE02, GS06/GE02, ISA13/IEA02), so the output validates with no findings and a benchmark
//! measures the clean path a production file takes.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            delimiters: Delimiters::COMMON,
            line_ending: LineEnding::None,
            one_interchange: false,
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
        }
    }

    /// Writes whole interchanges until at least `target_bytes` are written (and always at least
    /// one interchange); returns the number of bytes written. The last interchange is cut short
    /// at a set boundary, so the output overshoots the target by at most one transaction set
    /// and its trailers. Output goes out in blocks of about a megabyte, whatever the size.
    pub fn write_to<W: Write>(&mut self, out: &mut W, target_bytes: u64) -> io::Result<u64> {
        let d = self.options.delimiters;
        let line_ending = if d.segment == b'\n' {
            LineEnding::None
        } else {
            self.options.line_ending
        };
        let mut w = SegmentWriter::new(d, line_ending.bytes(), 2 * FLUSH_AT);
        loop {
            self.interchange(&mut w, out, target_bytes)?;
            if w.written() >= target_bytes {
                w.flush_to(out)?;
                return Ok(w.flushed());
            }
        }
    }

    /// One interchange, with sets added until the output holds `target_bytes`.
    fn interchange(
        &mut self,
        w: &mut SegmentWriter<'_>,
        out: &mut dyn Write,
        target_bytes: u64,
    ) -> io::Result<()> {
        let v5010 = self.rng.one_in(2);
        let d = w.delimiters();
        let sender = self.rng.below(PARTNERS.len() as u64) as usize;
        // Any other partner: an offset of 1..len-1 never comes back to the sender.
        let receiver =
            (sender + 1 + self.rng.below(PARTNERS.len() as u64 - 1) as usize) % PARTNERS.len();
        let (sender, receiver) = (PARTNERS[sender], PARTNERS[receiver]);
        let date = Date::random(&mut self.rng);
        let time = self.rng.below(24 * 60);
        let (hh, mm) = (time / 60, time % 60);
        let control = self.next_interchange;
        self.next_interchange = self.next_interchange % 999_999_999 + 1;
        let (isa11, isa12, gs08) = match d.repetition {
            Some(r) if v5010 => (r, "00501", "005010"),
            _ if v5010 => (b'U', "00501", "005010"),
            _ => (b'U', "00401", "004010"),
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
            let gs06 = self.next_group;
            self.next_group = self.next_group % 999_999_999 + 1;
            w.segment(
                "GS",
                &[
                    &kind.functional_id(),
                    &sender.1,
                    &receiver.1,
                    &date,
                    &format_args!("{hh:02}{mm:02}"),
                    &gs06,
                    &"X",
                    &gs08,
                ],
            );
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
            w.segment(
                "PO1",
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
            w.segment(
                "IT1",
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
    use x12gate::x12::{Interchanges, Limits};

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
            let findings = x12gate::check::file(
                &bytes,
                Limits::default(),
                &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
            );
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
            let findings = x12gate::check::file(
                &out,
                Limits::default(),
                &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
            );
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
        let findings = x12gate::check::file(
            &out,
            Limits::default(),
            &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()),
        );
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

    #[test]
    fn upc_check_digit() {
        // The GS1 example: 03600029145 -> 036000291452.
        assert_eq!(Upc(3_600_029_145).to_string(), "036000291452");
    }
}
