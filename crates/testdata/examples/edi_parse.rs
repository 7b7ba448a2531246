//! The peer row of `benches/large.sh`: the `edi` crate (crates.io, a parser that builds the
//! whole document as a tree of borrowed strings, `edi::loose_parse`) on a file, printing how
//! many interchanges, groups and sets it read. Exits 1 with its error when it cannot read the
//! file.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: edi_parse FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    match edi::loose_parse(&text) {
        Ok(doc) => {
            let groups: usize = doc
                .interchanges
                .iter()
                .map(|ic| ic.functional_groups.len())
                .sum();
            let sets: usize = doc
                .interchanges
                .iter()
                .flat_map(|ic| &ic.functional_groups)
                .map(|g| g.transactions.len())
                .sum();
            println!(
                "{} interchanges, {groups} groups, {sets} sets",
                doc.interchanges.len()
            );
        }
        Err(e) => {
            eprintln!("{path}: {e:?}");
            std::process::exit(1);
        }
    }
}
