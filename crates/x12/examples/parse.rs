//! Reads an X12 file (the path given, else standard input) and prints its envelope tree:
//! each interchange, its groups and their sets, with the segment counts SE01 should carry.
//!
//! `cargo run -p x12 --example parse -- fixtures/some.x12`

use std::io::Read as _;

fn main() -> std::io::Result<()> {
    let mut input = Vec::new();
    match std::env::args_os().nth(1) {
        Some(path) => input = std::fs::read(path)?,
        None => {
            std::io::stdin().read_to_end(&mut input)?;
        }
    }
    for read in x12::Interchanges::new(&input, x12::Limits::default()) {
        let ic = match read {
            Ok(ic) => ic,
            Err(e) => {
                println!("not read: {e}");
                continue;
            }
        };
        println!(
            "interchange {} (version {}, {} segments, ended by {:?})",
            ic.isa.control_number(),
            ic.isa.version(),
            ic.segment_count,
            ic.end
        );
        for group in &ic.groups {
            println!("  group {}", text(group.gs.element(6)));
            for set in group.sets.iter() {
                let declared = set.se.and_then(|se| se.element(1));
                println!(
                    "    set {} {}: {} segments, SE01 {}",
                    text(set.st.element(1)),
                    text(set.st.element(2)),
                    set.counted_segments(),
                    declared.map_or("missing".into(), |n| text(Some(n)))
                );
            }
        }
        if ic.stray_count > 0 {
            println!("  {} segments outside any envelope", ic.stray_count);
        }
    }
    Ok(())
}

fn text(bytes: Option<&[u8]>) -> String {
    String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned()
}
