//! Transaction-set definitions: documents generated from every definition validate clean and
//! round-trip through the structured form; the real-shaped fixtures do too, in the shape an
//! ERP expects (named loops, the 856 tree); schema errors reach the 997 and the 999; a
//! partner can ask for envelope checks only; sets without a definition pass through.

use proptest::prelude::*;
use serde_json::Value;
use x12gate::config::{AckKind, Config, Validation};
use x12gate::schema::{self, SetDef};
use x12gate::translate::{parse_document, parse_document_as, render_document, Document, Form};
use x12gate::x12::Limits;

use crate::util::{fixture, root, x12gate};

/// One interchange holding one set with `body`, in the definition's version.
fn interchange(def: &SetDef, body: &[(String, Vec<Vec<Vec<String>>>)]) -> Vec<u8> {
    let (isa12, isa11) = if def.version.as_str() >= "004020" {
        ("00501", "^")
    } else {
        ("00401", "U")
    };
    // The set's own functional group: an 810 in a GS*PO group is not in its group.
    let gs01 = x12gate::validate::functional_groups_of(def.id.as_bytes())
        .and_then(|groups| groups.first())
        .unwrap_or(&"PO");
    let mut text = format!(
        "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240101*1200*{isa11}*{isa12}*000000001*0*P*:~\n\
GS*{gs01}*ACME*X12GATE*20240101*1200*1*X*{}~\nST*{}*0001~\n",
        def.version, def.id
    );
    text.push_str(&testdata::example::to_x12(body, "\n"));
    text.push_str(&format!(
        "SE*{}*0001~\nGE*1*1~\nIEA*1*000000001~\n",
        body.len() + 2
    ));
    text.into_bytes()
}

fn render(doc: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    render_document(&serde_json::to_vec(doc).unwrap(), &mut out)
        .unwrap_or_else(|e| panic!("render: {e}"));
    out
}

fn definitions() -> Vec<&'static std::sync::Arc<SetDef>> {
    schema::builtin()
        .expect("the built-in definitions load")
        .all()
}

#[test]
fn the_six_sets_are_defined_in_both_versions() {
    let have: Vec<String> = definitions().iter().map(|d| d.name_key()).collect();
    for version in ["004010", "005010"] {
        for id in ["810", "850", "855", "856", "860", "997"] {
            let key = format!("{version}/{id}");
            assert!(have.contains(&key), "{key} missing from {have:?}");
        }
    }
}

#[test]
fn the_logistics_and_warehouse_sets_are_defined_in_both_versions() {
    let have: Vec<String> = definitions().iter().map(|d| d.name_key()).collect();
    for version in ["004010", "005010"] {
        for id in ["204", "210", "214", "940", "945", "990"] {
            let key = format!("{version}/{id}");
            assert!(have.contains(&key), "{key} missing from {have:?}");
            let def = definitions()
                .into_iter()
                .find(|d| d.name_key() == key)
                .unwrap();
            assert!(def.document.is_some(), "{key} declares no document key");
        }
    }
}

#[test]
fn the_remittance_advice_inventory_and_planning_sets_are_defined_in_both_versions() {
    let have: Vec<String> = definitions().iter().map(|d| d.name_key()).collect();
    for version in ["004010", "005010"] {
        for id in ["820", "824", "846", "830", "832", "862", "944"] {
            let key = format!("{version}/{id}");
            assert!(have.contains(&key), "{key} missing from {have:?}");
            let def = definitions()
                .into_iter()
                .find(|d| d.name_key() == key)
                .unwrap();
            assert!(def.document.is_some(), "{key} declares no document key");
        }
        // The 864 names no business document (BMG02 is a description), nor does the 852 (XQ
        // holds a handling code and the period's dates): defined, without a key.
        for id in ["864", "852"] {
            let key = format!("{version}/{id}");
            let def = definitions()
                .into_iter()
                .find(|d| d.name_key() == key)
                .unwrap_or_else(|| panic!("{key} missing"));
            assert!(def.document.is_none(), "{key} declares a document key");
        }
    }
}

#[test]
fn the_warehouse_routing_return_and_grocery_sets_are_defined() {
    let have: Vec<String> = definitions().iter().map(|d| d.name_key()).collect();
    let find = |key: &str| {
        assert!(
            have.contains(&key.to_string()),
            "{key} missing from {have:?}"
        );
        definitions()
            .into_iter()
            .find(|d| d.name_key() == key)
            .unwrap()
    };
    for version in ["004010", "005010"] {
        for id in ["943", "947", "180", "875", "880"] {
            let key = format!("{version}/{id}");
            assert!(
                find(&key).document.is_some(),
                "{key} declares no document key"
            );
        }
        // The 816's BHT03 is an optional, unqualified reference: defined, without a key.
        let key = format!("{version}/816");
        assert!(
            find(&key).document.is_none(),
            "{key} declares a document key"
        );
    }
    // The 753 and 754 have no 004010 table (they arrive in 004030): 005010 only.
    for id in ["753", "754"] {
        assert!(
            find(&format!("005010/{id}")).document.is_some(),
            "005010/{id} declares no key"
        );
        assert!(
            !have.contains(&format!("004010/{id}")),
            "004010/{id} defined"
        );
    }
}

#[test]
fn the_receiving_order_status_sequence_and_adjustment_sets_are_defined_in_both_versions() {
    let have: Vec<String> = definitions().iter().map(|d| d.name_key()).collect();
    for version in ["004010", "005010"] {
        for id in ["861", "865", "870", "869", "866", "812"] {
            let key = format!("{version}/{id}");
            assert!(have.contains(&key), "{key} missing from {have:?}");
            let def = definitions()
                .into_iter()
                .find(|d| d.name_key() == key)
                .unwrap();
            assert!(def.document.is_some(), "{key} declares no document key");
        }
    }
    // The 999 exists from 005010 on: defined there, without a key (an acknowledgment, as the
    // 997), and not in 004010.
    let def = definitions()
        .into_iter()
        .find(|d| d.name_key() == "005010/999")
        .expect("005010/999 missing");
    assert!(def.document.is_none(), "005010/999 declares a document key");
    assert!(
        !have.contains(&"004010/999".to_string()),
        "004010 has no 999"
    );
}

/// Whether the definition `key` (`004010/867`) declares a document key; a missing definition
/// fails.
fn keyed(key: &str) -> bool {
    definitions()
        .into_iter()
        .find(|d| d.name_key() == key)
        .unwrap_or_else(|| panic!("{key} is not defined"))
        .document
        .is_some()
}

#[test]
fn the_terminal_resale_waybill_service_invoice_and_ocean_sets_are_defined_in_both_versions() {
    for version in ["004010", "005010"] {
        // Named by the transfer/resale number BPT02 (867), the waybill N801 + its date N802
        // (417), the invoice number BIG02 (811, as the 810) and the carrier's invoice number
        // B302 (310, as the 210).
        for id in ["867", "417", "811", "310"] {
            assert!(
                keyed(&format!("{version}/{id}")),
                "{version}/{id} has no key"
            );
        }
        // An event on equipment (322) or on one container (315) has no number of its own:
        // defined, without a key.
        for id in ["322", "315"] {
            assert!(
                !keyed(&format!("{version}/{id}")),
                "{version}/{id} has a key"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A document generated from each definition validates clean, takes the structured form
    /// and renders back from it byte for byte.
    #[test]
    fn generated_documents_validate_clean_and_round_trip(seed in any::<u64>()) {
        for def in definitions() {
            let body = testdata::example::body(def, seed);
            let bytes = interchange(def, &body);
            let shown = String::from_utf8_lossy(&bytes);
            let findings: Vec<String> = x12gate::check::file(&bytes, Limits::default(), &x12gate::check::Checks::definitions(x12gate::schema::builtin().unwrap()))
                .iter()
                .map(ToString::to_string)
                .collect();
            prop_assert!(findings.is_empty(), "{}: {findings:#?}\n{shown}", def.name_key());
            let doc = parse_document_as(&bytes, Limits::default(), Form::Structured).unwrap();
            let set = &doc.interchanges[0].groups[0].sets[0];
            let key = def.name_key();
            prop_assert_eq!(set.schema.as_deref(), Some(key.as_str()), "{}", shown);
            prop_assert!(set.segments.is_none());
            let back = render(&doc);
            prop_assert!(back == bytes, "{}: rendered\n{}\nfrom\n{}", def.name_key(), String::from_utf8_lossy(&back), shown);
        }
    }
}

/// The sets of a fixture, structured.
fn structured(name: &str) -> (Document, Vec<u8>) {
    let bytes = std::fs::read(fixture(name)).unwrap();
    let doc = parse_document_as(&bytes, Limits::default(), Form::Structured).unwrap();
    (doc, bytes)
}

/// [`structured`], with its first set read against the definition `schema` (a guide's
/// `GS08/ST01`).
fn read_as(name: &str, schema: &str) -> (Document, Vec<u8>) {
    let (doc, bytes) = structured(name);
    assert_eq!(
        doc.interchanges[0].groups[0].sets[0].schema.as_deref(),
        Some(schema),
        "{name}"
    );
    (doc, bytes)
}

/// The set-level segments of the 999 a partner on a guide gets for `file`.
fn implementation_ack(file: &str) -> Vec<String> {
    set_response(
        file,
        &config_with(Validation::Schema, AckKind::ImplementationAck),
    )
}

fn content(doc: &Document, set: usize) -> &Value {
    let s = &doc.interchanges[0].groups[0].sets[set];
    s.content
        .as_ref()
        .unwrap_or_else(|| panic!("set {set} is not structured: {:?}", s.segments))
}

#[test]
fn every_valid_fixture_round_trips_through_the_structured_form() {
    let mut structured_sets = 0;
    for entry in std::fs::read_dir(root().join("fixtures")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "x12") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let Ok(raw) = parse_document(&bytes, Limits::default()) else {
            continue;
        };
        let doc = parse_document_as(&bytes, Limits::default(), Form::Structured).unwrap();
        for ic in &doc.interchanges {
            for g in &ic.groups {
                let version = g.gs.get(7).map(|v| format!("{v:?}")).unwrap_or_default();
                for s in &g.sets {
                    let id = format!("{:?}", s.st.first());
                    let defined = schema::builtin().unwrap().all().iter().any(|d| {
                        version.contains(&d.version) && id.contains(&format!("\"{}\"", d.id))
                    });
                    assert_eq!(
                        s.schema.is_some(),
                        defined,
                        "{}: set {id} of {version}: structured {}",
                        path.display(),
                        s.schema.is_some()
                    );
                    structured_sets += usize::from(s.schema.is_some());
                }
            }
        }
        assert_eq!(
            render(&doc),
            render(&raw),
            "{}: the structured form renders differently",
            path.display()
        );
    }
    assert!(
        structured_sets >= 10,
        "only {structured_sets} structured sets"
    );
}

#[test]
fn a_purchase_order_has_named_loops_in_both_versions() {
    for name in ["850-004010-multi.x12", "850-005010-multi.x12"] {
        let (doc, bytes) = structured(name);
        let c = content(&doc, 0);
        assert_eq!(c["BEG"]["purchase_order_number_03"], "PO-88213", "{name}");
        let parties = c["N1_loop"].as_array().expect("N1 loops");
        assert!(parties.len() >= 3, "{name}: {} N1 loops", parties.len());
        assert_eq!(parties[0]["N1"]["entity_identifier_code_01"], "BT");
        let lines = c["PO1_loop"].as_array().expect("PO1 loops");
        assert!(lines.len() >= 3, "{name}: {} PO1 loops", lines.len());
        assert_eq!(lines[1]["PO1"]["assigned_identification_01"], "2");
        assert_eq!(render(&doc), bytes, "{name}");
    }
}

#[test]
fn a_ship_notice_nests_shipment_order_pack_item() {
    for name in ["856-004010-sopi.x12", "856-005010-sopi.x12"] {
        let (doc, bytes) = structured(name);
        let c = content(&doc, 0);
        let level = |v: &Value| v["HL"]["hierarchical_level_code_03"].clone();
        let shipments = c["HL_loop"].as_array().expect("HL tree");
        assert_eq!(shipments.len(), 1, "{name}");
        let shipment = &shipments[0];
        assert_eq!(level(shipment), "S");
        let order = &shipment["HL_loop"][0];
        assert_eq!(level(order), "O");
        let packs = order["HL_loop"].as_array().expect("packs");
        assert!(packs.len() >= 2, "{name}");
        assert_eq!(level(&packs[0]), "P");
        let items = packs[0]["HL_loop"].as_array().expect("items");
        assert_eq!(level(&items[0]), "I");
        assert_eq!(render(&doc), bytes, "{name}");
    }
}

#[test]
fn a_professional_claim_nests_by_the_guides_loop_ids() {
    // GS08 005010X222A1 selects the 837P guide: its HL levels nest as the guide draws them
    // (2000A billing provider > 2000B subscriber > 2000C patient), each 2300 claim under
    // its subscriber or patient, service lines (2400) under their claim.
    let name = "837-005010X222A1.x12";
    let (doc, bytes) = structured(name);
    let set = &doc.interchanges[0].groups[0].sets[0];
    assert_eq!(set.schema.as_deref(), Some("005010X222A1/837"));
    let c = content(&doc, 0);
    assert_eq!(c["1000A_loop"]["NM1"]["entity_identifier_code_01"], "41");
    let billing = &c["2000A_loop"][0];
    assert_eq!(billing["HL"]["hierarchical_level_code_03"], "20");
    // NM1*85 and NM1*87 are told apart by their qualifier: 2010AA and 2010AB.
    assert_eq!(
        billing["2010AA_loop"]["NM1"]["entity_identifier_code_01"],
        "85"
    );
    assert_eq!(
        billing["2010AB_loop"]["NM1"]["entity_identifier_code_01"],
        "87"
    );
    let subscribers = billing["2000B_loop"].as_array().expect("2000B levels");
    assert_eq!(subscribers.len(), 2);
    assert_eq!(
        subscribers[0]["2010BA_loop"]["NM1"]["entity_identifier_code_01"],
        "IL"
    );
    assert_eq!(
        subscribers[0]["2010BB_loop"][0]["NM1"]["entity_identifier_code_01"],
        "PR"
    );
    let claim = &subscribers[0]["2300_loop"][0];
    assert_eq!(
        claim["CLM"]["claim_submitter_s_identifier_01"],
        "NWFC-24-00871"
    );
    // The claim's REF*G1 stands at the guide's Prior Authorization position.
    assert_eq!(
        claim["REF_5"]["reference_identification_qualifier_01"],
        "G1"
    );
    let lines = claim["2400_loop"].as_array().expect("2400 lines");
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["LX"]["assigned_number_01"], "2");
    // The second subscriber's claim is the patient's (2000C), under the subscriber.
    let patient = &subscribers[1]["2000C_loop"][0];
    assert_eq!(patient["HL"]["hierarchical_level_code_03"], "23");
    assert_eq!(
        patient["2010CA_loop"]["NM1"]["entity_identifier_code_01"],
        "QC"
    );
    assert_eq!(
        patient["2300_loop"][0]["2400_loop"][0]["LX"]["assigned_number_01"],
        "1"
    );
    assert!(subscribers[1].get("2300_loop").is_none());
    assert_eq!(render(&doc), bytes, "{name}");
}

#[test]
fn a_remittance_nests_header_claim_and_service_by_the_guides_loop_ids() {
    let name = "835-005010X221A1.x12";
    let (doc, bytes) = read_as(name, "005010X221A1/835");
    let c = content(&doc, 0);
    assert_eq!(c["1000A_loop"]["N1"]["entity_identifier_code_01"], "PR");
    assert_eq!(c["1000B_loop"]["N1"]["entity_identifier_code_01"], "PE");
    let claims = c["2000_loop"][0]["2100_loop"]
        .as_array()
        .expect("2100 claims");
    assert_eq!(claims.len(), 2);
    assert_eq!(
        claims[0]["CLP"]["claim_submitter_s_identifier_01"],
        "NWFC-24-00871"
    );
    // NM1*QC and NM1*82 stand at the guide's patient and service provider positions.
    assert_eq!(claims[0]["NM1"]["entity_identifier_code_01"], "QC");
    assert_eq!(claims[0]["NM1_4"]["entity_identifier_code_01"], "82");
    assert_eq!(claims[0]["2110_loop"].as_array().map(Vec::len), Some(2));
    assert_eq!(render(&doc), bytes, "{name}");
}

#[test]
fn a_4010_remittance_nests_by_the_guides_loop_ids_and_is_keyed_by_its_trace() {
    let name = "835-004010X091A1.x12";
    let (doc, bytes) = read_as(name, "004010X091A1/835");
    let c = content(&doc, 0);
    assert_eq!(c["1000A_loop"]["N1"]["entity_identifier_code_01"], "PR");
    assert_eq!(c["1000B_loop"]["N1"]["entity_identifier_code_01"], "PE");
    let claims = c["2000_loop"][0]["2100_loop"]
        .as_array()
        .expect("2100 claims");
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0]["NM1_4"]["entity_identifier_code_01"], "82");
    assert_eq!(claims[0]["2110_loop"].as_array().map(Vec::len), Some(2));
    assert_eq!(render(&doc), bytes, "{name}");
    // The remittance's key is its reassociation trace (TRN02), in both releases' guides.
    for key in ["004010X091A1/835", "005010X221A1/835"] {
        assert!(keyed(key), "{key} has no key");
    }
    let got = implementation_ack("fixtures/broken/segment-unexpected-835-x091.x12");
    assert!(got.contains(&"IK3*REF*18*2100*2".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLP01:NWFC-24-00871".to_string()),
        "{got:?}"
    );
}

#[test]
fn a_services_review_request_and_response_nest_by_the_guides_loop_ids() {
    // GS08 004010X094A1: UMO (2000A) > requester (2000B) > subscriber (2000C) > service
    // provider (2000E) > service (2000F); the request (BHT02 13) and the response (11) in
    // one definition, the response's review outcome (HCR) and certification date in 2000F.
    let name = "278-004010X094A1.x12";
    let (doc, bytes) = read_as(name, "004010X094A1/278");
    let service = |set: usize| {
        let c = content(&doc, set);
        // One UMO, requester and subscriber per set (the guide's maximum 1).
        let umo = &c["2000A_loop"];
        assert_eq!(umo["2010A_loop"]["NM1"]["entity_identifier_code_01"], "X3");
        let subscriber = &umo["2000B_loop"]["2000C_loop"];
        assert_eq!(
            subscriber["2010CA_loop"]["NM1"]["entity_identifier_code_01"],
            "IL"
        );
        let provider = &subscriber["2000E_loop"][0];
        assert_eq!(
            provider["2010E_loop"][0]["NM1"]["entity_identifier_code_01"],
            "SJ"
        );
        provider["2000F_loop"][0].clone()
    };
    assert_eq!(service(0)["UM"]["request_category_code_01"], "SC");
    assert_eq!(service(1)["HCR"]["action_code_01"], "A1");
    assert_eq!(render(&doc), bytes, "{name}");
    let got = implementation_ack("fixtures/broken/segment-unexpected-278-x094.x12");
    assert!(got.contains(&"IK3*DTP*23*2000*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*UM*21*2000*8".to_string()), "{got:?}");
    assert!(got.contains(&"CTX*HL01:3".to_string()), "{got:?}");
}

#[test]
fn an_inbound_999_is_read_against_its_guide_by_the_guides_loop_ids() {
    // GS08 005010X231A1: transaction set responses (2000), their errors (2100) and element
    // notes (2110).
    let name = "999-005010.x12";
    let (doc, bytes) = read_as(name, "005010X231A1/999");
    let c = content(&doc, 0);
    let responses = c["2000_loop"].as_array().expect("2000 responses");
    assert_eq!(responses.len(), 2);
    let error = &responses[0]["2100_loop"][0];
    assert_eq!(error["IK3"]["segment_id_code_01"], "PO1");
    assert!(error["2110_loop"][0]["IK4"].is_object(), "{error}");
    assert_eq!(render(&doc), bytes, "{name}");
    // A CTX outside its error loop is reported in the guide's 2000 loop; AK905 `7` is in the
    // standard's list but not the guide's.
    let bytes = std::fs::read(fixture("broken/segment-unexpected-999-x231.x12")).unwrap();
    let findings = x12gate::check::file(
        &bytes,
        Limits::default(),
        &x12gate::check::Checks::definitions(schema::builtin().unwrap()),
    );
    let loops: Vec<Option<String>> = findings
        .iter()
        .map(|f| f.detail.as_ref().and_then(|d| d.loop_id.clone()))
        .collect();
    assert_eq!(
        loops.first(),
        Some(&Some("2000".to_string())),
        "{findings:?}"
    );
    assert_eq!(findings.len(), 2, "{findings:?}");
}

#[test]
fn a_premium_payment_nests_by_the_guides_loop_ids_and_is_keyed_by_its_trace() {
    // GS08 005010X218: premium receiver (1000A) and payer (1000B), then the individual
    // remittances (2000B, ENT02 2J), each with its name (2100B) and premium detail (2300B).
    let name = "820-005010X218.x12";
    let (doc, bytes) = read_as(name, "005010X218/820");
    let c = content(&doc, 0);
    assert_eq!(c["1000A_loop"]["N1"]["entity_identifier_code_01"], "PE");
    assert_eq!(c["1000B_loop"]["N1"]["entity_identifier_code_01"], "PR");
    let people = c["2000B_loop"].as_array().expect("2000B remittances");
    assert_eq!(people.len(), 2);
    assert_eq!(
        people[1]["2100B_loop"][0]["NM1"]["entity_identifier_code_01"],
        "IL"
    );
    assert!(people[1]["2300B_loop"][0]["2320B_loop"].is_array());
    assert_eq!(render(&doc), bytes, "{name}");
    assert!(keyed("005010X218/820"), "005010X218/820 has no key");
    let got = implementation_ack("fixtures/broken/segment-unexpected-820-x218.x12");
    assert!(got.contains(&"IK3*RMR*13*2300*8".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*N1*17*2100*2".to_string()), "{got:?}");
    // The 4010 guide (GS08 004010X061A1): the same loops, the same key.
    let name = "820-004010X061A1.x12";
    let (doc, bytes) = read_as(name, "004010X061A1/820");
    let c = content(&doc, 0);
    let people = c["2000B_loop"].as_array().expect("2000B remittances");
    assert_eq!(
        people[0]["2100B_loop"][0]["NM1"]["entity_identifier_code_01"],
        "EY"
    );
    assert!(people[1]["2300B_loop"][0]["2320B_loop"].is_array());
    assert_eq!(render(&doc), bytes, "{name}");
    assert!(keyed("004010X061A1/820"), "004010X061A1/820 has no key");
    let got = implementation_ack("fixtures/broken/segment-unexpected-820-x061.x12");
    assert!(got.contains(&"IK3*N1*17*2100*2".to_string()), "{got:?}");
}

#[test]
fn an_eligibility_inquiry_and_response_nest_by_the_guides_loop_ids() {
    // GS08 005010X279A1: information source (2000A) > receiver (2000B) > subscriber (2000C)
    // > dependent (2000D), the benefits (2110C) inside the subscriber's name loop (2100C).
    let name = "270-005010X279A1.x12";
    let (doc, bytes) = read_as(name, "005010X279A1/270");
    let c = content(&doc, 0);
    let source = &c["2000A_loop"][0];
    assert_eq!(
        source["2100A_loop"]["NM1"]["entity_identifier_code_01"],
        "PR"
    );
    let subscribers = source["2000B_loop"][0]["2000C_loop"]
        .as_array()
        .expect("2000C levels");
    assert_eq!(subscribers.len(), 2);
    assert_eq!(
        subscribers[0]["2100C_loop"]["2110C_loop"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let dependent = &subscribers[1]["2000D_loop"][0];
    assert_eq!(dependent["HL"]["hierarchical_level_code_03"], "23");
    assert_eq!(
        dependent["2100D_loop"]["NM1"]["entity_identifier_code_01"],
        "03"
    );
    assert_eq!(render(&doc), bytes, "{name}");

    let name = "271-005010X279A1.x12";
    let (doc, bytes) = read_as(name, "005010X279A1/271");
    let c = content(&doc, 0);
    let subscriber = &c["2000A_loop"][0]["2000B_loop"][0]["2000C_loop"][0];
    let benefits = subscriber["2100C_loop"]["2110C_loop"]
        .as_array()
        .expect("2110C benefits");
    assert_eq!(benefits.len(), 5);
    // LS/LE wrap the benefit's related entity (2120C) inside 2110C.
    assert_eq!(
        benefits[4]["2120C_loop"][0]["NM1"]["entity_identifier_code_01"],
        "P3"
    );
    assert_eq!(render(&doc), bytes, "{name}");
}

#[test]
fn a_999_for_an_eligibility_guide_names_its_loops() {
    let config = config_with(Validation::Schema, AckKind::ImplementationAck);
    let got = set_response("fixtures/broken/segment-unexpected-270.x12", &config);
    assert!(got.contains(&"IK3*AMT*19*2110*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*EQ*18*2110*8".to_string()), "{got:?}");
    let got = set_response("fixtures/broken/segment-unexpected-271.x12", &config);
    assert!(got.contains(&"IK3*DMG*15*2100*8".to_string()), "{got:?}");
    // The guide before the addenda (GS08 005010X279) has its own definitions.
    let got = set_response("fixtures/broken/segment-unexpected-270-x279.x12", &config);
    assert!(
        got.contains(&"AK2*270*0001*005010X279".to_string()),
        "{got:?}"
    );
    assert!(got.contains(&"IK3*AMT*19*2110*2".to_string()), "{got:?}");
    // The 4010 guide (GS08 004010X092A1): its loops as well, in a 997's AK3.
    let config = config_with(Validation::Schema, AckKind::FunctionalAck);
    let got = set_response("fixtures/broken/segment-unexpected-271-x092.x12", &config);
    assert!(got.contains(&"AK3*DMG*15**8".to_string()), "{got:?}");
    let (doc, bytes) = structured("271-004010X092A1.x12");
    let c = content(&doc, 0);
    let subscriber = &c["2000A_loop"][0]["2000B_loop"][0]["2000C_loop"][0];
    assert!(subscriber["2100C_loop"]["2110C_loop"].is_array());
    assert_eq!(render(&doc), bytes);
    // The 4010 guide before its addenda (GS08 004010X092) is read with the addenda's tables.
    let (doc, bytes) = structured("270-004010X092.x12");
    assert_eq!(
        doc.interchanges[0].groups[0].sets[0].schema.as_deref(),
        Some("004010X092/270")
    );
    let c = content(&doc, 0);
    assert!(c["2000A_loop"][0]["2000B_loop"][0]["2000C_loop"].is_array());
    assert_eq!(render(&doc), bytes);
    let got = implementation_ack("fixtures/broken/segment-out-of-sequence-270-x092-pre.x12");
    assert!(got.contains(&"IK3*REF*17*2100*7".to_string()), "{got:?}");
}

#[test]
fn a_claim_status_request_and_response_nest_by_the_guides_loop_ids() {
    // GS08 005010X212: source (2000A) > receiver (2000B) > provider (2000C) > subscriber
    // (2000D) > dependent (2000E), each claim (2200D/2200E) under its subscriber or dependent.
    for (name, schema, line) in [
        ("276-005010X212.x12", "005010X212/276", "2210D_loop"),
        ("277-005010X212.x12", "005010X212/277", "2220D_loop"),
    ] {
        let (doc, bytes) = structured(name);
        assert_eq!(
            doc.interchanges[0].groups[0].sets[0].schema.as_deref(),
            Some(schema)
        );
        let c = content(&doc, 0);
        let provider = &c["2000A_loop"][0]["2000B_loop"][0]["2000C_loop"][0];
        assert_eq!(
            provider["2100C_loop"][0]["NM1"]["entity_identifier_code_01"],
            "1P"
        );
        let subscribers = provider["2000D_loop"].as_array().expect("2000D levels");
        assert_eq!(subscribers.len(), 2, "{name}");
        let claim = &subscribers[0]["2200D_loop"][0];
        assert_eq!(
            claim[line][0]["REF"]["reference_identification_02"],
            "LN-0001"
        );
        let dependent = &subscribers[1]["2000E_loop"][0];
        assert_eq!(
            dependent["2100E_loop"]["NM1"]["entity_identifier_code_01"],
            "QC"
        );
        assert!(dependent["2200E_loop"].is_array(), "{name}");
        assert_eq!(render(&doc), bytes, "{name}");
    }
}

#[test]
fn a_999_for_a_claim_status_guide_names_its_loops() {
    let config = config_with(Validation::Schema, AckKind::ImplementationAck);
    let got = set_response("fixtures/broken/segment-unexpected-276.x12", &config);
    assert!(got.contains(&"IK3*REF*15*2200*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*AMT*16*2200*8".to_string()), "{got:?}");
    assert!(got.contains(&"CTX*HL01:4".to_string()), "{got:?}");
    let got = set_response("fixtures/broken/segment-unexpected-277.x12", &config);
    assert!(got.contains(&"IK3*NM1*11*2100*8".to_string()), "{got:?}");
    // The 4010 guide (GS08 004010X093A1), in a 997's AK3.
    let got = set_response(
        "fixtures/broken/segment-unexpected-276-x093.x12",
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(got.contains(&"AK3*REF*14**2".to_string()), "{got:?}");
    // The 4010 response (GS08 004010X093A1): each claim (2200D, by its TRN) with its service
    // lines (2220D) under the subscriber, in a 999 the subscriber's HL01.
    let (doc, bytes) = structured("277-004010X093A1.x12");
    assert_eq!(
        doc.interchanges[0].groups[0].sets[0].schema.as_deref(),
        Some("004010X093A1/277")
    );
    let c = content(&doc, 0);
    let provider = &c["2000A_loop"][0]["2000B_loop"][0]["2000C_loop"][0];
    let subscribers = provider["2000D_loop"].as_array().expect("2000D levels");
    let claim = &subscribers[0]["2200D_loop"][0];
    assert_eq!(claim["2220D_loop"].as_array().map(Vec::len), Some(1));
    assert!(subscribers[1]["2000E_loop"][0]["2200E_loop"].is_array());
    assert_eq!(render(&doc), bytes);
    let got = set_response("fixtures/broken/segment-unexpected-277-x093.x12", &config);
    assert!(got.contains(&"IK3*REF*16*2200*2".to_string()), "{got:?}");
    assert!(got.contains(&"CTX*HL01:4".to_string()), "{got:?}");
    // The claim acknowledgment (277CA, GS08 005010X214): 2000D is the patient (HL03 PT).
    let (doc, bytes) = structured("277-005010X214.x12");
    let c = content(&doc, 0);
    // One receiver level per source in this guide (2000B's maximum is 1): an object.
    let provider = &c["2000A_loop"][0]["2000B_loop"]["2000C_loop"][0];
    let patients = provider["2000D_loop"].as_array().expect("2000D patients");
    assert_eq!(patients.len(), 2);
    assert_eq!(
        patients[1]["2200D_loop"][0]["2220D_loop"][0]["REF"]["reference_identification_02"],
        "LN-0003"
    );
    assert_eq!(render(&doc), bytes);
    let got = set_response("fixtures/broken/segment-unexpected-277ca.x12", &config);
    assert!(got.contains(&"IK3*REF*29*2200*2".to_string()), "{got:?}");
    assert!(got.contains(&"CTX*HL01:4".to_string()), "{got:?}");
}

#[test]
fn an_enrolment_nests_members_coverages_and_reporting_categories_by_the_guides_loop_ids() {
    let name = "834-005010X220A1.x12";
    let (doc, bytes) = read_as(name, "005010X220A1/834");
    let c = content(&doc, 0);
    // N1*P5 and N1*IN are told apart by their qualifier: 1000A and 1000B.
    assert_eq!(c["1000A_loop"]["N1"]["entity_identifier_code_01"], "P5");
    assert_eq!(c["1000B_loop"]["N1"]["entity_identifier_code_01"], "IN");
    let members = c["2000_loop"].as_array().expect("2000 members");
    assert_eq!(members.len(), 3);
    assert_eq!(
        members[0]["2100A_loop"]["NM1"]["entity_identifier_code_01"],
        "IL"
    );
    assert_eq!(
        members[0]["2300_loop"][0]["2310_loop"][0]["NM1"]["entity_identifier_code_01"],
        "P3"
    );
    // LS ... LE: 2700 > 2710 (LX) > 2750 (N1).
    assert_eq!(
        members[2]["2700_loop"]["2710_loop"][0]["2750_loop"]["N1"]["entity_identifier_code_01"],
        "75"
    );
    assert_eq!(render(&doc), bytes, "{name}");
    let got = implementation_ack("fixtures/broken/segment-unexpected-834.x12");
    assert!(got.contains(&"IK3*REF*11*2000*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*DMG*27*2100*8".to_string()), "{got:?}");
    // The 4010 guide (GS08 004010X095A1): members (2000) with their names (2100A) and
    // coverages (2300 > 2310), keyed by BGN02 as the 5010 guide.
    let name = "834-004010X095A1.x12";
    let (doc, bytes) = read_as(name, "004010X095A1/834");
    let c = content(&doc, 0);
    let members = c["2000_loop"].as_array().expect("2000 members");
    assert_eq!(members.len(), 2);
    assert_eq!(
        members[0]["2100A_loop"]["NM1"]["entity_identifier_code_01"],
        "IL"
    );
    assert_eq!(
        members[0]["2300_loop"][0]["2310_loop"][0]["NM1"]["entity_identifier_code_01"],
        "P3"
    );
    assert_eq!(render(&doc), bytes, "{name}");
    assert!(keyed("004010X095A1/834"), "004010X095A1/834 has no key");
    let got = implementation_ack("fixtures/broken/segment-unexpected-834-x095.x12");
    assert!(got.contains(&"IK3*REF*10*2000*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*HD*17*2300*8".to_string()), "{got:?}");
}

#[test]
fn an_institutional_claim_nests_by_the_guides_loop_ids() {
    let name = "837-005010X223A2.x12";
    let (doc, bytes) = read_as(name, "005010X223A2/837");
    let c = content(&doc, 0);
    let billing = &c["2000A_loop"][0];
    assert_eq!(
        billing["2010AA_loop"]["NM1"]["entity_identifier_code_01"],
        "85"
    );
    let subscriber = &billing["2000B_loop"][0];
    let claim = &subscriber["2300_loop"][0];
    assert_eq!(
        claim["CLM"]["claim_submitter_s_identifier_01"],
        "SMH-24-031801"
    );
    assert_eq!(
        claim["2310A_loop"]["NM1"]["entity_identifier_code_01"],
        "71"
    );
    assert_eq!(claim["2400_loop"].as_array().map(Vec::len), Some(3));
    // The patient's claim (2000C) under the subscriber, after the subscriber's own.
    let patient = &subscriber["2000C_loop"][0];
    assert_eq!(
        patient["2300_loop"][0]["2400_loop"][0]["SV2"]["product_service_id_01"],
        "0320"
    );
    assert_eq!(render(&doc), bytes, "{name}");
    let got = implementation_ack("fixtures/broken/segment-unexpected-837i.x12");
    assert!(got.contains(&"IK3*DTP*21*2300*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*CLM*19*2300*8".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLM01:SMH-24-031801".to_string()),
        "{got:?}"
    );
}

#[test]
fn the_4010_claims_nest_by_the_guides_loop_ids() {
    // GS08 004010X098A1, the 4010 professional claim: 2000A > 2000B > 2000C, the patient's
    // claim (2300) with its rendering provider (2310B) and service lines (2400).
    let name = "837-004010X098A1.x12";
    let (doc, bytes) = read_as(name, "004010X098A1/837");
    let c = content(&doc, 0);
    assert_eq!(c["1000A_loop"]["NM1"]["entity_identifier_code_01"], "41");
    let billing = &c["2000A_loop"][0];
    assert_eq!(
        billing["2010AA_loop"]["NM1"]["entity_identifier_code_01"],
        "85"
    );
    let subscriber = &billing["2000B_loop"][0];
    assert_eq!(
        subscriber["2010BB_loop"]["NM1"]["entity_identifier_code_01"],
        "PR"
    );
    let patient = &subscriber["2000C_loop"][0];
    assert_eq!(
        patient["2010CA_loop"]["NM1"]["entity_identifier_code_01"],
        "QC"
    );
    let claim = &patient["2300_loop"][0];
    assert_eq!(
        claim["CLM"]["claim_submitter_s_identifier_01"],
        "NWFC-24-00871"
    );
    assert_eq!(
        claim["2310B_loop"]["NM1"]["entity_identifier_code_01"],
        "82"
    );
    assert_eq!(claim["2400_loop"].as_array().map(Vec::len), Some(2));
    assert_eq!(render(&doc), bytes, "{name}");
    // GS08 004010X096A1, the 4010 institutional claim: the subscriber's claim, then the
    // patient's level under the subscriber.
    let name = "837-004010X096A1.x12";
    let (doc, bytes) = read_as(name, "004010X096A1/837");
    let c = content(&doc, 0);
    let subscriber = &c["2000A_loop"][0]["2000B_loop"][0];
    let claim = &subscriber["2300_loop"][0];
    assert_eq!(
        claim["2310A_loop"]["NM1"]["entity_identifier_code_01"],
        "71"
    );
    assert_eq!(claim["2400_loop"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        subscriber["2000C_loop"][0]["2300_loop"][0]["CLM"]["claim_submitter_s_identifier_01"],
        "SMH-24-031802"
    );
    assert_eq!(render(&doc), bytes, "{name}");
    // Their 999s name the claim loop and the claim (here under the patient's level, 2000C);
    // a 997's AK303 names bounded (LS/LE) loops only.
    let got = implementation_ack("fixtures/broken/segment-unexpected-837-x098.x12");
    assert!(got.contains(&"IK3*DTP*29*2300*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*CLM*27*2300*8".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLM01:NWFC-24-00871".to_string()),
        "{got:?}"
    );
    let got = set_response(
        "fixtures/broken/segment-unexpected-837i-x096.x12",
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(got.contains(&"AK3*DTP*22**2".to_string()), "{got:?}");
}

#[test]
fn a_dental_claim_nests_by_the_guides_loop_ids() {
    // GS08 005010X224A2: the subscriber's own claim (2300 under 2000B), the patient's under
    // 2000C, each service line (2400) with its SV3 and teeth (TOO).
    let name = "837-005010X224A2.x12";
    let (doc, bytes) = read_as(name, "005010X224A2/837");
    let c = content(&doc, 0);
    let subscribers = c["2000A_loop"][0]["2000B_loop"]
        .as_array()
        .expect("2000B levels");
    let claim = &subscribers[0]["2300_loop"][0];
    assert_eq!(
        claim["CLM"]["claim_submitter_s_identifier_01"],
        "LSD-24-032501"
    );
    assert_eq!(
        claim["2310B_loop"]["NM1"]["entity_identifier_code_01"],
        "82"
    );
    let lines = claim["2400_loop"].as_array().expect("2400 lines");
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["TOO"][0]["code_list_qualifier_code_01"], "JP");
    let patient = &subscribers[1]["2000C_loop"][0];
    assert_eq!(
        patient["2300_loop"][0]["CLM"]["claim_submitter_s_identifier_01"],
        "LSD-24-032502"
    );
    assert_eq!(render(&doc), bytes, "{name}");
    let got = implementation_ack("fixtures/broken/segment-unexpected-837d.x12");
    assert!(got.contains(&"IK3*DTP*21*2300*2".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*TOO*31*2400*8".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLM01:LSD-24-032501".to_string()),
        "{got:?}"
    );
    // The 4010 dental guide (GS08 004010X097A1): the same claim and line loops.
    let name = "837-004010X097A1.x12";
    let (doc, bytes) = read_as(name, "004010X097A1/837");
    let c = content(&doc, 0);
    let claim = &c["2000A_loop"][0]["2000B_loop"][0]["2300_loop"][0];
    assert_eq!(
        claim["2310B_loop"]["NM1"]["entity_identifier_code_01"],
        "82"
    );
    assert_eq!(claim["2400_loop"].as_array().map(Vec::len), Some(3));
    assert_eq!(render(&doc), bytes, "{name}");
    let got = implementation_ack("fixtures/broken/segment-unexpected-837d-x097.x12");
    assert!(got.contains(&"IK3*DTP*21*2300*2".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLM01:LSD-24-032511".to_string()),
        "{got:?}"
    );
}

#[test]
fn a_999_for_a_guide_names_the_guides_loop_in_ik303_and_the_claim_in_ctx() {
    let got = implementation_ack("fixtures/broken/segment-unexpected-837.x12");
    assert!(got.contains(&"IK3*NM1*8*2010*8".to_string()), "{got:?}");
    assert!(got.contains(&"IK3*DTP*24*2300*2".to_string()), "{got:?}");
    assert!(
        got.contains(&"CTX*CLM01:NWFC-24-00871".to_string()),
        "{got:?}"
    );
    // The guide before the addenda (GS08 005010X222) is read with the addenda's tables.
    let got = implementation_ack("fixtures/broken/segment-unexpected-837-x222.x12");
    assert!(
        got.contains(&"AK2*837*0001*005010X222".to_string()),
        "{got:?}"
    );
    assert!(got.contains(&"IK3*DTP*24*2300*2".to_string()), "{got:?}");
    // The 997 keeps AK303 for bounded loops only.
    let got = set_response(
        "fixtures/broken/segment-unexpected-837.x12",
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(got.contains(&"AK3*NM1*8**8".to_string()), "{got:?}");
}

#[test]
fn parse_gives_the_structured_form_and_raw_the_generic_one_and_render_takes_both() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("850-004010-multi.x12");
    let structured = x12gate(dir.path())
        .arg("parse")
        .arg(&file)
        .output()
        .unwrap();
    let raw = x12gate(dir.path())
        .args(["parse", "--raw"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(structured.status.success() && raw.status.success());
    let s: Value = serde_json::from_slice(&structured.stdout).unwrap();
    let r: Value = serde_json::from_slice(&raw.stdout).unwrap();
    let set = |v: &Value| v["interchanges"][0]["groups"][0]["sets"][0].clone();
    assert_eq!(set(&s)["schema"], "004010/850");
    assert!(set(&s)["content"]["PO1_loop"].is_array());
    assert!(set(&r)["segments"].is_array() && set(&r)["content"].is_null());
    let mut rendered = Vec::new();
    for out in [&structured.stdout, &raw.stdout] {
        let json = dir.path().join("doc.json");
        std::fs::write(&json, out).unwrap();
        let r = x12gate(dir.path())
            .arg("render")
            .arg(&json)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        rendered.push(r.stdout);
    }
    assert_eq!(rendered[0], rendered[1]);
    assert_eq!(rendered[0], std::fs::read(&file).unwrap());
}

#[test]
fn render_names_the_place_of_a_bad_structured_key() {
    let (mut doc, _) = structured("850-004010-multi.x12");
    let set = &mut doc.interchanges[0].groups[0].sets[0];
    let content = set.content.as_mut().unwrap();
    content["PO1_loop"][1]["PO1"]["quantity_ordred_02"] = Value::String("5".into());
    let err = render_document(&serde_json::to_vec(&doc).unwrap(), &mut Vec::new()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("PO1_loop[1]/PO1") && text.contains("quantity_ordred_02"),
        "{text}"
    );
}

fn config_with(validation: Validation, ack: AckKind) -> Config {
    let mut config = Config::load(&root().join("partners.toml")).unwrap();
    for p in &mut config.partners {
        p.checks.validation = validation;
        p.ack.kind = ack;
    }
    config
}

/// AK2..AK5 (or IK5) of the first 997/999 of `file` under `config`.
fn set_response(file: &str, config: &Config) -> Vec<String> {
    let bytes = std::fs::read(root().join(file)).unwrap();
    let ic = x12gate::x12::Interchanges::new(&bytes, config.limits)
        .next()
        .unwrap()
        .unwrap();
    let decision = x12gate::pipeline::decide(&ic, config, x12gate::schema::builtin().unwrap());
    let counters =
        x12gate::ack::Numbers::following(x12gate::pipeline::numbers_needed(&decision), None, None);
    let now = chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, 0)
        .unwrap();
    let acks = x12gate::pipeline::acknowledgments(&ic, &decision, config, &counters, now).unwrap();
    let text: String = acks
        .iter()
        .map(|o| String::from_utf8_lossy(&o.bytes).into_owned())
        .collect();
    text.split(['~', '\n'])
        .map(str::trim)
        .filter(|s| {
            ["AK2", "AK3", "AK4", "AK5", "IK3", "IK4", "IK5", "CTX"]
                .iter()
                .any(|id| s.starts_with(&format!("{id}*")))
        })
        .map(String::from)
        .collect()
}

#[test]
fn envelope_partners_get_no_segment_errors_and_schema_partners_do() {
    let file = "fixtures/broken/element-invalid-code.x12";
    let schema = set_response(
        file,
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(schema.iter().any(|s| s.starts_with("AK3*")), "{schema:?}");
    assert!(
        schema.iter().any(|s| s.starts_with("AK5*R*5")),
        "{schema:?}"
    );
    let envelope = set_response(
        file,
        &config_with(Validation::Envelope, AckKind::FunctionalAck),
    );
    assert!(
        !envelope.iter().any(|s| s.starts_with("AK3*")),
        "{envelope:?}"
    );
    assert!(envelope.iter().any(|s| s == "AK5*A"), "{envelope:?}");
}

#[test]
fn a_999_carries_ik3_ctx_and_ik4() {
    // N104 too short, in the ship-to N1 loop: the CTX names that party.
    let file = "fixtures/broken/element-too-short.x12";
    let got = implementation_ack(file);
    assert_eq!(
        got,
        [
            "AK2*850*0001",
            "IK3*N1*5**8",
            "CTX*N101>ST",
            "IK4*4*67*4*7",
            "IK5*R*5"
        ],
        "{got:?}"
    );
}

#[test]
fn an_error_in_a_bounded_loop_names_it_in_ak303_and_its_line_in_ctx() {
    // LS/LE around lead times inside line 2: LDT02 holds a letter.
    let good = std::fs::read_to_string(fixture("850-004010-multi.x12")).unwrap();
    let bytes = good
        .replace("PO4*12~\n", "PO4*12~\nLS*A~\nLDT*AE*1X*DA~\nLE*A~\n")
        .replace("SE*27*0001", "SE*30*0001");
    assert_ne!(bytes, good);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ls.x12");
    std::fs::write(&file, &bytes).unwrap();
    let config = config_with(Validation::Schema, AckKind::ImplementationAck);
    let got = set_response(file.to_str().unwrap(), &config);
    assert!(got.contains(&"IK3*LDT*24*A*8".to_string()), "{got:?}");
    assert!(got.contains(&"CTX*PO101>2".to_string()), "{got:?}");
    assert!(got.contains(&"IK4*2*380*6".to_string()), "{got:?}");
}

#[test]
fn an_envelope_error_rejects_the_set_whatever_the_validation() {
    // A segment id with a space: AK502 5 from the envelope rules alone still rejects.
    let file = "fixtures/broken/segment-id-invalid.x12";
    for validation in [Validation::Envelope, Validation::Schema] {
        let got = set_response(file, &config_with(validation, AckKind::FunctionalAck));
        assert!(
            got.iter().any(|s| s == "AK5*R*5"),
            "{validation:?}: {got:?}"
        );
    }
}

#[test]
fn a_set_without_a_definition_passes_at_envelope_level_in_the_generic_form() {
    // The 271 of a release x12gate defines nothing of (a 005010 guide it lacks would be read
    // against the 005010 271's standard table) has no definition: generic JSON, an AK5 A with
    // no AK3. Absolute paths: `join` keeps them as they are.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("271-no-definition.x12");
    let bytes = std::fs::read(fixture("repetitions-composites-005010.x12")).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    std::fs::write(&copy, text.replace("005010X279A1", "006010X279A1")).unwrap();
    let file = copy.to_str().unwrap();
    let (doc, _) = structured(file);
    let set = &doc.interchanges[0].groups[0].sets[0];
    assert!(set.schema.is_none() && set.segments.as_ref().is_some_and(|s| !s.is_empty()));
    let got = set_response(
        file,
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(!got.iter().any(|s| s.starts_with("AK3*")), "{got:?}");
    assert!(got.iter().any(|s| s == "AK5*A"), "{got:?}");
}

#[test]
fn a_large_file_is_checked_in_parallel_with_the_same_findings_in_the_same_order() {
    // Over the 1 MiB threshold, with errors sprinkled through many interchanges.
    let mut bytes = testdata::file(7, 3_000_000);
    let mut planted = 0;
    for i in 0..bytes.len().saturating_sub(4) {
        if bytes[i..].starts_with(b"~PO1*") && i % 7 == 0 {
            bytes[i + 1] = b'Z';
            planted += 1;
        }
    }
    assert!(planted > 10, "only {planted} errors planted");
    let schemas = schema::builtin().unwrap();
    let mut sequential = Vec::new();
    for ic in x12gate::x12::Interchanges::new(&bytes, Limits::default()) {
        let ic = ic.unwrap();
        sequential.extend(x12gate::validate::interchange(&ic));
        sequential.extend(schema::findings(&ic, schemas));
    }
    let parallel = x12gate::check::file(
        &bytes,
        Limits::default(),
        &x12gate::check::Checks::definitions(schemas),
    );
    assert!(sequential.len() >= planted, "{} findings", sequential.len());
    assert_eq!(parallel, sequential);
}

/// `process --json` on one file in a fresh data folder with the example configuration;
/// returns the report and the folder.
fn process(name: &str, bytes: &[u8]) -> (Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, bytes).unwrap();
    let out = x12gate(dir.path())
        .args(["process", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (report, dir)
}

fn read_ack(report: &Value) -> String {
    let path = report["acks"][0].as_str().expect("an acknowledgment");
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_malformed_optional_element_is_noted_and_the_order_still_delivered() {
    // PER02 (name) is optional, AN 1-60: 61 characters are too long, the order still usable.
    let good = std::fs::read_to_string(fixture("850-004010-multi.x12")).unwrap();
    let long = "J".repeat(61);
    let bytes = good.replace("PER*BD*JANE ROE*", &format!("PER*BD*{long}*"));
    assert_ne!(bytes, good);
    let (report, dir) = process("noted.x12", bytes.as_bytes());
    assert_eq!(report["disposition"], "accepted", "{report}");
    let ack = read_ack(&report);
    assert!(ack.contains("AK3*PER*6**8~"), "{ack}");
    assert!(ack.contains(&format!("AK4*2*93*5*{long}~")), "{ack}");
    assert!(
        ack.contains("AK5*E*5~") && ack.contains("AK9*E*1*1*1~"),
        "{ack}"
    );
    // The order is delivered as its own document, noted error and all.
    let outputs = report["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{report}");
    let path = std::path::Path::new(outputs[0].as_str().unwrap());
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(crate::util::order_file("ACME", "PO-88213").as_str()),
        "{report}"
    );
    let docs = report["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 1, "{report}");
    assert_eq!(docs[0]["key"], "ZZ:ACME:850:PO-88213:00:", "{report}");
    assert_eq!(docs[0]["disposition"], "new", "{report}");
    assert_eq!(docs[0]["output"], outputs[0], "{report}");
    let doc: Value = crate::util::read_json(path).expect("a whole document file");
    assert_eq!(doc["delivery"]["interchange"], "ZZ:ACME:000000301", "{doc}");
    let set = &doc["set"];
    assert_eq!(set["content"]["PER"][0]["name_02"], long.as_str());
    drop(dir);
}

#[test]
fn a_set_rejected_by_its_definition_is_not_translated() {
    let bytes = std::fs::read(root().join("fixtures/broken/element-invalid-code.x12")).unwrap();
    let (report, _dir) = process("rejected.x12", &bytes);
    assert_eq!(report["disposition"], "rejected", "{report}");
    assert!(report["outputs"].as_array().unwrap().is_empty(), "{report}");
    let ack = read_ack(&report);
    assert!(
        ack.contains("AK3*BEG*2**8~AK4*2*92*7*XX~AK5*R*5~")
            || ack.contains("AK3*BEG*2**8~\nAK4*2*92*7*XX~\nAK5*R*5~"),
        "{ack}"
    );
    assert!(
        report["reason"].as_str().unwrap().contains("BEG02"),
        "{report}"
    );
}

#[test]
fn an_older_release_is_read_structured_and_keyed_as_the_release_it_agrees_with() {
    // A 004060 856 is a 005010 856 (schemas/releases.toml, `same`): it is walked, translated
    // and keyed as one, renders back byte for byte, and keeps its own GS08.
    let text = std::fs::read_to_string(fixture("856-005010-sopi.x12")).unwrap();
    let older = text
        .replacen("*00501*", "*00406*", 1)
        .replacen("*X*005010~", "*X*004060~", 1);
    assert!(older.contains("*X*004060~") && older.contains("*00406*"));
    let bytes = older.into_bytes();
    let schemas = schema::builtin().unwrap();
    let checks = x12gate::check::Checks::definitions(schemas);
    let findings = x12gate::check::file(&bytes, Limits::default(), &checks);
    assert!(findings.is_empty(), "{findings:?}");
    let doc = parse_document_as(&bytes, Limits::default(), Form::Structured).unwrap();
    let group = &doc.interchanges[0].groups[0];
    assert!(format!("{:?}", group.gs.get(7)).contains("\"004060\""));
    assert_eq!(group.sets[0].schema.as_deref(), Some("005010/856"));
    assert!(content(&doc, 0)["HL_loop"].is_array());
    assert_eq!(render(&doc), bytes);
    let ic = x12gate::x12::Interchanges::new(&bytes, Limits::default())
        .next()
        .unwrap()
        .unwrap();
    let set = ic.groups[0].sets.get(0).unwrap();
    let def = schemas.find(b"004060", b"856").unwrap();
    let key = x12gate::document::identify(ic.isa.field(5), ic.isa.field(6), &set, def)
        .expect("a 004060 856 has its document key");
    assert_eq!(key.set_id, "856");
    assert!(!key.document_id.is_empty(), "{}", key.key);
    // A release the table does not name for the set stays at envelope level, noted once.
    let unread = String::from_utf8(bytes)
        .unwrap()
        .replacen("*X*004060~", "*X*003040~", 1)
        .into_bytes();
    let findings = x12gate::check::file(&unread, Limits::default(), &checks);
    let rules: Vec<_> = findings.iter().map(|f| f.rule.name()).collect();
    assert_eq!(rules, ["envelope-level-only"], "{findings:?}");
    let doc = parse_document_as(&unread, Limits::default(), Form::Structured).unwrap();
    assert_eq!(doc.interchanges[0].groups[0].sets[0].schema, None);
}

#[test]
fn a_997_of_004010_may_carry_the_syntax_error_codes_20_to_22() {
    // 716 and 718 in 004010 are the union of Stedi's lists and EdiFabric's, which has 20-22:
    // a partner's 997 that uses them is not rejected; a code in neither list still is.
    let text = std::fs::read_to_string(fixture("997-004010.x12")).unwrap();
    let schemas = schema::builtin().unwrap();
    let checks = x12gate::check::Checks::definitions(schemas);
    let rules = |ak5: &str, ak9: &str| -> Vec<&'static str> {
        let t = text
            .replacen("AK5*A~", ak5, 1)
            .replacen("AK9*A*1*1*1~", ak9, 1);
        x12gate::check::file(t.as_bytes(), Limits::default(), &checks)
            .iter()
            .map(|f| f.rule.name())
            .collect()
    };
    assert_eq!(rules("AK5*R*20~", "AK9*R*1*1*0*21~"), Vec::<&str>::new());
    assert_eq!(rules("AK5*R*22~", "AK9*R*1*1*0*22~"), Vec::<&str>::new());
    assert_eq!(
        rules("AK5*R*14~", "AK9*R*1*1*0*9~"),
        ["element-invalid-code", "element-invalid-code"]
    );
}

#[test]
fn an_element_a_guide_does_not_use_is_i10_in_a_999_and_10_in_a_997() {
    // The 837P's CLM03 is not used in the 2300 claim (005010X222A1): the 999 has its own
    // code, I10; the 997's list (723) has none, so 10, "exclusion condition violated".
    let file = "fixtures/broken/element-not-used-837.x12";
    let got = implementation_ack(file);
    assert!(got.contains(&"IK4*3*1032*I10*MB".to_string()), "{got:?}");
    let got = set_response(
        file,
        &config_with(Validation::Schema, AckKind::FunctionalAck),
    );
    assert!(got.contains(&"AK3*CLM*23**8".to_string()), "{got:?}");
    assert!(got.contains(&"AK4*3*1032*10*MB".to_string()), "{got:?}");
    assert!(got.contains(&"AK5*R*5".to_string()), "{got:?}");
    // A component: IK401 names the element and the component (C030).
    let got = implementation_ack("fixtures/broken/element-not-used-837-component.x12");
    assert!(got.contains(&"IK4*11:3*1362*I10*OA".to_string()), "{got:?}");
    // An element the guide requires at this position (2010BB NM109), missing: 1.
    let got = implementation_ack("fixtures/broken/element-missing-837-guide.x12");
    assert!(got.contains(&"IK3*NM1*22*2010*8".to_string()), "{got:?}");
    assert!(got.contains(&"IK4*9*67*1".to_string()), "{got:?}");
}
