//! The interchange control segments besides ISA and IEA: the ISB (grade of service request)
//! and ISE (deferred delivery request) an interchange may carry after its ISA, and the TA1s
//! a partner sends us. Each element is held to its X12.5 definition, as a table: presence,
//! length, and what its type admits (a code of a small, settled list, a real date or time).
//!
//! Where each definition comes from:
//! - ISB01, I34 Grade of Service Code, ID 1/1, mandatory, codes 0 Normal, 1 Low, 2 Urgent:
//!   Stedi's ISB and I34 pages for 003050, 003060, 004020, 006050 and 007010 agree.
//! - ISE01 I35 Delivery Date DT 6/6 M, ISE02 I36 Delivery Time TM 4/4 M, ISE03 I37 Delivery
//!   Time Code ID 2/2 O: Stedi's ISE pages for 003070, 004020, 004040 (and its release-less
//!   I36 page, TM 4/4). I37's list (01-24 for ISO P01-P12 and M12-M01, and the US zones, GM,
//!   LT, UT) is the same on Stedi's I37 pages from 003050 to 008030.
//! - TA1: TA101 I12 N0 9/9, TA102 I08 DT 6/6, TA103 I09 TM 4/4, TA104 I17 A/E/R, TA105 I18
//!   000-031, all mandatory: X12-REFERENCE 5.2 and stupidedi's 00501 TA1.rb and
//!   element_defs.rb (which lists I18 000 to 031).
//!
//! A TA1 echoes the ISA13, ISA09 and ISA10 of the interchange it answers (X12.5, TA101 to
//! TA103), even when they were wrong: one whose TA105 reports that very field (018, 014 or
//! 015) carries the faulty value on purpose, so that element is not held to its definition
//! (our own TA1s do the same: `ack`). Only the field its note names is let off.
//!
//! An element is reported once, for its first fault; an extra element once per segment, at
//! the first one that holds data (an empty trailing element is not data, as in
//! `schema::check`).

use super::{all_digits, at, isa_date, isa_time, shown};
use crate::finding::{Finding, Rule, Ta105};
use crate::x12::{Interchange, Segment};

/// What an element's value must be, beyond its length.
#[derive(Clone, Copy)]
enum Kind {
    /// One of these codes.
    Code(&'static [&'static str]),
    /// Digits only (N0).
    Digits,
    /// A real date, YYMMDD.
    Date,
    /// A real time, HHMM.
    Time,
    /// A TA105 note code: one of [`Ta105`] (I18, 000 to 031).
    NoteCode,
}

struct Element {
    mandatory: bool,
    min: usize,
    max: usize,
    kind: Kind,
    /// What the element must be, for messages: "a grade of service code (I34: ...)".
    what: &'static str,
    rule: Rule,
}

const GRADES_OF_SERVICE: &[&str] = &["0", "1", "2"];

/// I37: 01-12 are ISO P01-P12, 13-24 are M12-M01 (`+` and `-` being restricted characters).
const DELIVERY_TIME_CODES: &[&str] = &[
    "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "CD", "CS", "CT", "ED", "ES", "ET", "GM", "LT",
    "MD", "MS", "MT", "PD", "PS", "PT", "UT",
];

const ACK_CODES: &[&str] = &["A", "E", "R"];

const ISB: &[Element] = &[Element {
    mandatory: true,
    min: 1,
    max: 1,
    kind: Kind::Code(GRADES_OF_SERVICE),
    what: "a grade of service code (I34: 0, 1 or 2)",
    rule: Rule::IsbGradeOfServiceInvalid,
}];

const ISE: &[Element] = &[
    Element {
        mandatory: true,
        min: 6,
        max: 6,
        kind: Kind::Date,
        what: "a delivery date (I35, a real date YYMMDD)",
        rule: Rule::IseDeliveryDateInvalid,
    },
    Element {
        mandatory: true,
        min: 4,
        max: 4,
        kind: Kind::Time,
        what: "a delivery time (I36, a real time HHMM)",
        rule: Rule::IseDeliveryTimeInvalid,
    },
    Element {
        mandatory: false,
        min: 2,
        max: 2,
        kind: Kind::Code(DELIVERY_TIME_CODES),
        what: "a delivery time code (I37: 01-24, CD to PT, GM, LT, UT)",
        rule: Rule::IseDeliveryTimeCodeInvalid,
    },
];

const TA1: &[Element] = &[
    Element {
        mandatory: true,
        min: 9,
        max: 9,
        kind: Kind::Digits,
        what: "an interchange control number (I12, nine digits)",
        rule: Rule::Ta1ControlNumberInvalid,
    },
    Element {
        mandatory: true,
        min: 6,
        max: 6,
        kind: Kind::Date,
        what: "an interchange date (I08, a real date YYMMDD)",
        rule: Rule::Ta1DateInvalid,
    },
    Element {
        mandatory: true,
        min: 4,
        max: 4,
        kind: Kind::Time,
        what: "an interchange time (I09, a real time HHMM)",
        rule: Rule::Ta1TimeInvalid,
    },
    Element {
        mandatory: true,
        min: 1,
        max: 1,
        kind: Kind::Code(ACK_CODES),
        what: "an acknowledgment code (I17: A, E or R)",
        rule: Rule::Ta1AckCodeInvalid,
    },
    Element {
        mandatory: true,
        min: 3,
        max: 3,
        kind: Kind::NoteCode,
        what: "a note code (I18, 000 to 031)",
        rule: Rule::Ta1NoteCodeInvalid,
    },
];

/// The findings of an interchange's ISB, ISE and TA1s, in file order.
pub(super) fn findings(ic: &Interchange<'_>) -> Vec<Finding> {
    let mut findings = Vec::new();
    for segment in ic.isb.iter() {
        check(segment, ISB, None, &mut findings);
    }
    for segment in ic.ise.iter() {
        check(segment, ISE, None, &mut findings);
    }
    for segment in &ic.ta1 {
        let echoed = match segment.element(5) {
            Some(b"018") => Some(1),
            Some(b"014") => Some(2),
            Some(b"015") => Some(3),
            _ => None,
        };
        check(segment, TA1, echoed, &mut findings);
    }
    findings
}

fn valid(kind: Kind, value: &[u8]) -> bool {
    match kind {
        Kind::NoteCode => Ta105::ALL.iter().any(|c| c.value().as_bytes() == value),
        Kind::Code(codes) => codes.iter().any(|c| c.as_bytes() == value),
        Kind::Digits => all_digits(value),
        Kind::Date => isa_date(value),
        Kind::Time => isa_time(value),
    }
}

/// Holds `segment` to `elements`, all but element `echoed` (1-based).
fn check(
    segment: &Segment<'_>,
    elements: &[Element],
    echoed: Option<usize>,
    findings: &mut Vec<Finding>,
) {
    let id = segment.id_str();
    for (i, def) in elements.iter().enumerate() {
        let n = i + 1;
        if echoed == Some(n) {
            continue;
        }
        let value = segment.element(n).unwrap_or_default();
        let fault = if value.is_empty() {
            def.mandatory.then(|| "is missing".to_string())
        } else if !(def.min..=def.max).contains(&value.len()) {
            let must = if def.min == def.max {
                format!("exactly {}", def.min)
            } else {
                format!("{} to {}", def.min, def.max)
            };
            Some(format!(
                "\"{}\" is {} bytes, must be {must}",
                shown(value),
                value.len()
            ))
        } else if !valid(def.kind, value) {
            Some(format!("\"{}\" is not a valid value", shown(value)))
        } else {
            None
        };
        if let Some(fault) = fault {
            let message = format!("{id}{n:02} {fault}: expected {}", def.what);
            findings.push(Finding::new(def.rule, at(segment, n), id.clone(), message));
        }
    }
    let extra = segment
        .elements()
        .enumerate()
        .skip(elements.len())
        .find(|(_, e)| !e.value.is_empty());
    if let Some((i, e)) = extra {
        let n = i + 1;
        let message = format!(
            "{id}{n:02} \"{}\": {id} has {} element(s) in X12.5, not more",
            shown(e.value),
            elements.len()
        );
        findings.push(Finding::new(
            Rule::ControlSegmentElementTooMany,
            at(segment, n),
            id,
            message,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x12::{Interchanges, Limits};

    const ISA: &str = "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*^*00501*000000001*0*P*:~";

    fn rules(body: &str) -> Vec<(Rule, Option<u16>)> {
        let text = format!("{ISA}{body}IEA*0*000000001~");
        let ic = Interchanges::new(text.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        findings(&ic)
            .iter()
            .map(|f| (f.rule, f.position.element))
            .collect()
    }

    #[test]
    fn valid_isb_ise_and_ta1_have_no_findings() {
        assert_eq!(rules("ISB*2~ISE*240229*2359*ET~"), []);
        assert_eq!(rules("ISB*0~ISE*240101*0000~"), []);
        assert_eq!(rules("TA1*000000112*240301*1200*R*031~"), []);
        assert_eq!(rules("TA1*000000112*240301*1200*E*000~"), []);
        // A TA1 reporting a bad ISA09, ISA10 or ISA13 echoes it, and only that one.
        assert_eq!(rules("TA1*000000112*240231*1200*E*014~"), []);
        assert_eq!(rules("TA1*000000112*240301*2500*E*015~"), []);
        assert_eq!(rules("TA1*0000001AB*240301*1200*R*018~"), []);
        assert_eq!(
            rules("TA1*0000001AB*240231*1200*E*014~"),
            [(Rule::Ta1ControlNumberInvalid, Some(1))]
        );
        // An empty trailing element is not data.
        assert_eq!(rules("ISB*1*~"), []);
    }

    #[test]
    fn each_element_is_held_to_its_definition() {
        use Rule::*;
        assert_eq!(rules("ISB*01~"), [(IsbGradeOfServiceInvalid, Some(1))]);
        assert_eq!(rules("ISB*3~"), [(IsbGradeOfServiceInvalid, Some(1))]);
        assert_eq!(rules("ISB~"), [(IsbGradeOfServiceInvalid, Some(1))]);
        assert_eq!(rules("ISB*1*X~"), [(ControlSegmentElementTooMany, Some(2))]);
        assert_eq!(
            rules("ISE*240230*2400*XX~"),
            [
                (IseDeliveryDateInvalid, Some(1)),
                (IseDeliveryTimeInvalid, Some(2)),
                (IseDeliveryTimeCodeInvalid, Some(3))
            ]
        );
        assert_eq!(
            rules("ISE*20240101*1200~"),
            [(IseDeliveryDateInvalid, Some(1))]
        );
        assert_eq!(rules("ISE*240101~"), [(IseDeliveryTimeInvalid, Some(2))]);
        assert_eq!(
            rules("TA1*0659*20110922*0512*A~"),
            [
                (Ta1ControlNumberInvalid, Some(1)),
                (Ta1DateInvalid, Some(2)),
                (Ta1NoteCodeInvalid, Some(5))
            ]
        );
        assert_eq!(
            rules("TA1*00000011A*240301*1261*X*032*1~"),
            [
                (Ta1ControlNumberInvalid, Some(1)),
                (Ta1TimeInvalid, Some(3)),
                (Ta1AckCodeInvalid, Some(4)),
                (Ta1NoteCodeInvalid, Some(5)),
                (ControlSegmentElementTooMany, Some(6))
            ]
        );
    }
}
