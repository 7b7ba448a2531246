//! Which functional group (GS01, element 479) each transaction set (ST01, element 143)
//! belongs to: X12's assignment, which the 479 code list itself states in its codes'
//! descriptions ("PO Purchase Order (850)", "FA Functional or Implementation Acknowledgment
//! Transaction Sets (997, 999)").
//!
//! A table, not a rule: kept apart from `validate` so the rules stay readable and the data
//! can be checked on its own (the tests below hold it against the releases' 479 lists).
//!
//! # Sources (the keys of the comments below)
//! - `S`: Stedi's set-to-GS01 table, Stedi-Demos/bootstrap-archived
//!   `src/lib/lookupFunctionalIdentifierCode.ts` (commit e3eaa87).
//! - `J`: the "functional group" column of tcd/eddy `data/transaction-sets.tsv` (commit
//!   609def2), gathered from the jobisez.com and edifactory.de set pages (its `sources.md`).
//! - `D4`: the 004010 479 list with its descriptions, tcd/eddy `data/code-lists/479.tsv`
//!   (from the ecomgx17 EDI_4010 element pages).
//! - `D5`: the 005010 479 list with its descriptions, GRoguelon/edi_x12
//!   `priv/element_values/hipaa/r5010/functional_identifier_code.json` (commit 2eda883).
//! - `P`: azoner/pyx12 `pyx12/map/maps.xml`, which selects its 999 maps by `fic="FA"`.
//!
//! Every entry is given by at least two of them; the common sets (810, 850, 855, 856, 860,
//! 997, the healthcare 27x and 8xx, the logistics 2xx and 9xx, the 8xx supply chain sets)
//! by all four of S, J, D4 and D5 (the 999 by J, D5 and P). What could be read of IBM B2B
//! Integrator's "Functional group descriptions" page and of the Cloverleaf documentation's
//! "Functional ID Code" table (codes A to C) agrees. Where the sources differ, every code any of them gives
//! is accepted, so no set is rejected for a group a source assigns it to; those entries say
//! who says what. Sets that one source alone names (306, 321, 411, 499, 622, 994), or that
//! two name differently (603, 890), are left out: they are not checked.
//!
//! The assignment is X12's from 004010 on; earlier releases assigned some codes otherwise
//! (Stedi's 003020 479 list puts the 999, then "Acceptance/Rejection Advice", under AG and
//! the 996 under CG), so the rule applies from 004010 (see `validate`).

/// ST01 and the GS01 codes of its functional group, sorted by ST01.
const SETS: &[(&str, &[&str])] = &[
    ("100", &["PG"]),
    ("101", &["NL"]),
    ("102", &["AC"]),
    ("103", &["AB", "AP"]), // AB: S J; AP: D5
    ("104", &["SA"]),
    ("105", &["BF"]),
    ("106", &["MH"]),
    ("107", &["MC"]),
    ("108", &["MK"]),
    ("109", &["VE"]),
    ("110", &["IA"]),
    ("111", &["IF"]),
    ("112", &["PQ"]),
    ("113", &["CL"]),
    ("120", &["VC"]),
    ("121", &["VS"]),
    ("124", &["VD"]),
    ("125", &["MR"]),
    ("126", &["VA"]),
    ("127", &["VB"]),
    ("128", &["DI"]),
    ("129", &["VH"]),
    ("130", &["ED"]),
    ("131", &["AK"]),
    ("132", &["HU"]),
    ("133", &["CW"]),
    ("135", &["SL"]),
    ("138", &["TT"]),
    ("139", &["SL"]),
    ("140", &["WA"]),
    ("141", &["WA"]),
    ("142", &["WA"]),
    ("143", &["WA"]),
    ("144", &["LT"]),
    ("146", &["RY"]),
    ("147", &["RZ"]),
    ("148", &["IJ"]),
    ("149", &["NT"]),
    ("150", &["TN"]),
    ("151", &["TA"]),
    ("152", &["GR"]),
    ("153", &["CB"]),
    ("154", &["UC"]),
    ("155", &["BC"]),
    ("157", &["NP"]),
    ("158", &["TJ"]),
    ("159", &["MP"]),
    ("160", &["SJ"]),
    ("161", &["TR"]),
    ("163", &["AS"]),
    ("170", &["ER"]),
    ("175", &["FC"]),
    ("176", &["FC", "TC"]), // FC: S J D4 D5; TC: D4
    ("179", &["EP"]),
    ("180", &["AN"]),
    ("185", &["RD"]),
    ("186", &["UW"]),
    ("187", &["AE"]),
    ("188", &["EC"]),
    ("189", &["AF"]),
    ("190", &["SV"]),
    ("191", &["SD"]),
    ("194", &["GT"]),
    ("195", &["LA"]),
    ("196", &["PK"]),
    ("197", &["TO"]),
    ("198", &["ME"]),
    ("199", &["TO"]),
    ("200", &["ME"]),
    ("201", &["ME"]),
    ("202", &["MJ"]),
    ("203", &["MG"]),
    ("204", &["SM"]),
    ("205", &["MN"]),
    ("206", &["MG"]),
    ("210", &["IM"]),
    ("211", &["BL"]),
    ("212", &["TM"]),
    ("213", &["MI"]),
    ("214", &["QM"]),
    ("215", &["UP"]),
    ("216", &["PU"]),
    ("217", &["FG"]),
    ("218", &["FH"]),
    ("219", &["AB"]),
    ("220", &["AH"]),
    ("222", &["CE"]),
    ("223", &["MQ"]),
    ("224", &["MA"]),
    ("225", &["MY"]),
    ("227", &["TU"]),
    ("228", &["EN"]),
    ("240", &["MZ"]),
    ("242", &["DS"]),
    ("244", &["PN"]),
    ("245", &["ME"]),
    ("248", &["SU"]),
    ("249", &["AT"]),
    ("250", &["PV"]),
    ("251", &["CP"]),
    ("252", &["IE"]),
    ("255", &["UI"]),
    ("256", &["PE"]),
    ("259", &["MG"]),
    ("260", &["MG"]),
    ("261", &["ME"]),
    ("262", &["ME"]),
    ("263", &["ME"]),
    ("264", &["MG"]),
    ("265", &["TO"]),
    ("266", &["MG"]),
    ("267", &["AD"]),
    ("268", &["PF"]),
    ("269", &["HV"]),
    ("270", &["HS"]),
    ("271", &["HB"]),
    ("272", &["LN"]),
    ("273", &["ID"]),
    ("274", &["PW"]),
    ("275", &["PI"]),
    ("276", &["HR"]),
    ("277", &["HN"]),
    ("278", &["HI"]),
    ("280", &["VI"]),
    ("283", &["TE"]),
    ("284", &["IH"]),
    ("285", &["CV"]),
    ("286", &["KM"]),
    ("288", &["WI"]),
    ("290", &["CO"]),
    ("300", &["RO"]),
    ("301", &["RO"]),
    ("303", &["RO"]),
    ("304", &["SO"]),
    ("309", &["AQ", "SO"]), // AQ: S J D5; SO: D4 D5
    ("310", &["IO"]),
    ("311", &["SO"]),
    ("312", &["IO"]),
    ("313", &["QO"]),
    ("315", &["QO"]),
    ("317", &["SO"]),
    ("319", &["SO"]),
    ("322", &["SO"]),
    ("323", &["SO"]),
    ("324", &["SO"]),
    ("325", &["SO"]),
    ("326", &["SO"]),
    ("350", &["AU", "SO"]), // AU: S J D5; SO: D4 D5
    ("352", &["AV", "SO"]), // AV: S J D5; SO: D4 D5
    ("353", &["AX", "SO"]), // AX: S J D5; SO: D4 D5
    ("354", &["AY", "SO"]), // AY: S J D5; SO: D4 D5
    ("355", &["AZ", "SO"]), // AZ: S J D5; SO: D4 D5
    ("356", &["BA", "SO"]), // BA: S J D5; SO: D4 D5
    ("357", &["BB", "SO"]), // BB: S J D5; SO: D4 D5
    ("358", &["BD", "SO"]), // BD: S J D5; SO: D4 D5
    ("359", &["BG"]),
    ("361", &["SO"]),
    ("362", &["OC"]),
    ("404", &["SR"]),
    ("410", &["IR"]),
    ("412", &["TB"]),
    ("414", &["CR"]),
    ("417", &["WB"]),
    ("418", &["IC"]),
    ("419", &["SR"]),
    ("420", &["CH"]),
    ("421", &["IS"]),
    ("422", &["DM"]),
    ("423", &["GB", "RL"]), // GB: D4; RL: S J D4 D5
    ("424", &["SB"]),
    ("425", &["WT"]),
    ("426", &["RW"]),
    ("427", &["MW"]),
    ("429", &["RU"]),
    ("431", &["RM"]),
    ("432", &["RX"]),
    ("433", &["RH"]),
    ("434", &["RJ"]),
    ("435", &["RK"]),
    ("436", &["LI"]),
    ("437", &["RV"]),
    ("440", &["WR"]),
    ("451", &["EV"]),
    ("452", &["PL"]),
    ("453", &["ST"]),
    ("455", &["PB"]),
    ("456", &["EI"]),
    ("460", &["TP"]),
    ("463", &["TP"]),
    ("466", &["TP"]),
    ("468", &["TP"]),
    ("470", &["RB"]),
    ("475", &["SN"]),
    ("485", &["TO", "TP"]), // TO: D5; TP: S J D4 D5
    ("486", &["TO", "TP"]), // TO: D5; TP: S J D4 D5
    ("490", &["TP"]),
    ("492", &["TP"]),
    ("494", &["TP"]),
    ("500", &["MM"]),
    ("501", &["WG"]),
    ("503", &["PH"]),
    ("504", &["CC"]),
    ("511", &["RN"]),
    ("517", &["MV"]),
    ("521", &["AO"]),
    ("527", &["MD"]),
    ("536", &["LR"]),
    ("540", &["ES"]),
    ("561", &["D4"]),
    ("567", &["D3"]),
    ("568", &["D5"]),
    ("601", &["SE"]),
    ("602", &["TS"]),
    ("620", &["EX"]),
    ("625", &["WL"]),
    ("650", &["MO"]),
    ("715", &["GL"]),
    ("753", &["RF"]),
    ("754", &["RG"]),
    ("805", &["CP"]),
    ("806", &["PJ"]),
    ("810", &["IN"]),
    ("811", &["CI"]),
    ("812", &["CD"]),
    ("813", &["TF"]),
    ("814", &["GE"]),
    ("815", &["CS"]),
    ("816", &["OR"]),
    ("818", &["RP"]),
    ("819", &["IN", "JB"]), // IN: D4; JB: S J D5
    ("820", &["RA"]),
    ("821", &["FR"]),
    ("822", &["AA"]),
    ("823", &["LB"]),
    ("824", &["AG"]),
    ("826", &["TI"]),
    ("827", &["FR"]),
    ("828", &["DA"]),
    ("829", &["PY"]),
    ("830", &["PS"]),
    ("831", &["CT"]),
    ("832", &["SC"]),
    ("833", &["ME"]),
    ("834", &["BE"]),
    ("835", &["HP"]),
    ("836", &["RQ"]),
    ("837", &["HC"]),
    ("838", &["TD"]),
    ("839", &["PK"]),
    ("840", &["RQ"]),
    ("841", &["SP"]),
    ("842", &["NC"]),
    ("843", &["RR"]),
    ("844", &["CF"]),
    ("845", &["PA"]),
    ("846", &["IB"]),
    ("847", &["MX"]),
    ("848", &["MS"]),
    ("849", &["CF"]),
    ("850", &["PO"]),
    ("851", &["LS"]),
    ("852", &["PD"]),
    ("853", &["RI"]),
    ("854", &["DD"]),
    ("855", &["PR"]),
    ("856", &["SH"]),
    ("857", &["BS"]),
    ("858", &["SI"]),
    ("859", &["FB"]),
    ("860", &["PC"]),
    ("861", &["RC"]),
    ("862", &["SS"]),
    ("863", &["RT"]),
    ("864", &["TX"]),
    ("865", &["CA"]),
    ("866", &["SQ"]),
    ("867", &["PT"]),
    ("868", &["MT"]),
    ("869", &["RS"]),
    ("870", &["RS"]),
    ("871", &["CM"]),
    ("872", &["ME"]),
    ("873", &["CU"]),
    ("874", &["CQ"]),
    ("875", &["OG"]),
    ("876", &["OG"]),
    ("877", &["CJ"]),
    ("878", &["QG"]),
    ("879", &["QG"]),
    ("880", &["GP"]),
    ("881", &["CK", "CN"]), // CK: D4 D5; CN: S J
    ("882", &["IG"]),
    ("883", &["DF"]),
    ("884", &["MF"]),
    ("885", &["SG", "UA"]), // SG: D4; UA: S J D4 D5
    ("886", &["UB"]),
    ("887", &["CN"]),
    ("888", &["QG"]),
    ("889", &["QG"]),
    ("891", &["UD"]),
    ("892", &["WG"]),
    ("893", &["AM", "QG"]), // AM: S J D5; QG: D4
    ("894", &["DX"]),
    ("895", &["DX"]),
    ("896", &["QG"]),
    ("897", &["SC"]),
    ("920", &["GC"]),
    ("924", &["GC"]),
    ("925", &["GC"]),
    ("926", &["GC"]),
    ("928", &["AI"]),
    ("940", &["OW"]),
    ("943", &["AR"]),
    ("944", &["RE"]),
    ("945", &["SW"]),
    ("947", &["AW"]),
    ("980", &["IA", "IM", "IO", "IR"]), // IA: D4 D5; IM: D4 D5; IO: D4 D5; IR: D4 D5
    ("990", &["GF"]),
    ("993", &["NR"]),
    ("996", &["FT"]),
    ("997", &["FA"]),
    ("998", &["AL"]),
    ("999", &["FA"]), // FA: J D5 P
];

/// The functional identifier codes (GS01) the set `st01` belongs to, if the table has it.
/// Asked once per set: looked up by the id's number in a table made once (a binary search
/// of the ids by `memcmp` was a sixth of envelope validation of an interchange of tiny sets).
pub(super) fn groups_of(st01: &[u8]) -> Option<&'static [&'static str]> {
    static BY_NUMBER: std::sync::LazyLock<Vec<Option<&'static [&'static str]>>> =
        std::sync::LazyLock::new(|| {
            let mut table = vec![None; 1000];
            for (id, groups) in SETS {
                if let Some(slot) = number(id.as_bytes()).and_then(|n| table.get_mut(n)) {
                    *slot = Some(*groups);
                }
            }
            table
        });
    BY_NUMBER.get(number(st01)?).copied().flatten()
}

/// A three-digit set id as a number.
fn number(id: &[u8]) -> Option<usize> {
    match id {
        [a, b, c] if id.iter().all(u8::is_ascii_digit) => {
            Some(usize::from(a - b'0') * 100 + usize::from(b - b'0') * 10 + usize::from(c - b'0'))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_id_finds_its_groups_and_nothing_else_does() {
        for (id, groups) in SETS {
            assert_eq!(groups_of(id.as_bytes()), Some(*groups), "{id}");
        }
        for other in [&b"85"[..], b"8500", b"85A", b"", b"000", b"\xff50"] {
            assert_eq!(groups_of(other), None, "{other:?}");
        }
        let known = SETS.len();
        let found = (0..1000)
            .filter(|n| groups_of(format!("{n:03}").as_bytes()).is_some())
            .count();
        assert_eq!(found, known);
    }

    #[test]
    fn the_table_is_sorted_and_every_code_is_a_functional_identifier() {
        assert!(
            SETS.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, no set twice"
        );
        let schemas = crate::schema::builtin().unwrap();
        let lists = [
            schemas.code_list(b"004010", "479").unwrap(),
            schemas.code_list(b"005010", "479").unwrap(),
        ];
        for (id, groups) in SETS {
            assert!(
                id.len() == 3 && id.bytes().all(|b| b.is_ascii_digit()),
                "{id}"
            );
            assert!(!groups.is_empty(), "{id}");
            for g in *groups {
                // BG (359, Customs Customer Profile Management) is a code of later
                // releases (Stedi's 006010 list), in neither list here.
                let known = lists.iter().any(|l| l.contains(g.as_bytes())) || *g == "BG";
                assert!(
                    known,
                    "{id}: {g} is in neither the 004010 nor the 005010 list"
                );
            }
        }
    }

    #[test]
    fn the_common_sets_are_in_their_groups() {
        for (set, group) in [
            ("810", "IN"),
            ("850", "PO"),
            ("855", "PR"),
            ("856", "SH"),
            ("860", "PC"),
            ("997", "FA"),
            ("999", "FA"),
            ("820", "RA"),
            ("824", "AG"),
            ("837", "HC"),
            ("835", "HP"),
            ("834", "BE"),
            ("270", "HS"),
            ("271", "HB"),
            ("276", "HR"),
            ("277", "HN"),
            ("278", "HI"),
            ("940", "OW"),
            ("945", "SW"),
            ("204", "SM"),
            ("210", "IM"),
            ("214", "QM"),
            ("990", "GF"),
            ("846", "IB"),
            ("832", "SC"),
            ("830", "PS"),
            ("862", "SS"),
            ("864", "TX"),
        ] {
            assert_eq!(groups_of(set.as_bytes()), Some(&[group][..]), "{set}");
        }
        assert_eq!(groups_of(b"819"), Some(&["IN", "JB"][..]));
        assert_eq!(groups_of(b"306"), None);
        assert_eq!(groups_of(b"85"), None);
        assert_eq!(groups_of(b""), None);
    }
}
