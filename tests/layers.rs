//! The layer table in `src/lib.rs` (`# Layers`), enforced: every `crate::` path in `src/`
//! (the binary aside: it sits above every layer) names a module on an earlier row than its
//! own file's module. The table is read from the crate's docs, so the docs and this test
//! cannot drift apart. Test code is held to the same order: a test that needs a higher layer
//! to set up belongs in `tests/`, where the public API is used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::root;

/// Row of each module, from the table's lines `//! | N | `a` `b` | ... |`.
fn table(lib: &str) -> BTreeMap<String, usize> {
    let section = lib
        .split_once("//! # Layers")
        .map(|(_, rest)| rest)
        .expect("src/lib.rs has a `# Layers` section");
    let mut rows = BTreeMap::new();
    for line in section.lines().skip(1).take_while(|l| l.starts_with("//!")) {
        let cells: Vec<&str> = line.trim_start_matches("//!").split('|').collect();
        let (Some(row), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(row) = row.trim().parse::<usize>() else {
            continue; // the header and its rule
        };
        for name in modules.split('`').skip(1).step_by(2) {
            let before = rows.insert(name.to_string(), row);
            assert!(before.is_none(), "`{name}` is on two rows of the table");
        }
    }
    assert!(!rows.is_empty(), "the `# Layers` table has no rows");
    rows
}

/// The modules `src/lib.rs` declares (`pub mod x;`, `mod x;`).
fn declared(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// `src` with comments, strings and character literals blanked (their newlines kept, so
/// line numbers stay right): only code is left to search for `crate::`.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, from: usize, to: usize| {
        out.extend(src[from..to].chars().filter(|&c| c == '\n'));
        out.push(' ');
    };
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with("/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if src[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if src[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(src, i) {
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{1b}'), or a lifetime ('a), left as it is.
            let end = if rest[1..].starts_with('\\') {
                rest[2..].find('\'').map(|n| i + 3 + n)
            } else {
                let width = rest[1..].chars().next().map_or(1, char::len_utf8);
                rest[1 + width..].starts_with('\'').then_some(i + 2 + width)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Where the raw string literal (`r"..."`, `br#"..."#`) starting at `i` ends, if one does.
fn raw_string_end(src: &str, i: usize) -> Option<usize> {
    let before = src[..i].chars().next_back();
    if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let rest = src[i..].strip_prefix('b').unwrap_or(&src[i..]);
    let rest = rest.strip_prefix('r')?;
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    let body = rest[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let n = body.find(&close)?;
    Some(src.len() - body.len() + n + close.len())
}

/// Every module a `crate::` path in `code` names, with its line: `crate::a::b`, and each
/// item of a group, `crate::{a, b::c}`.
fn uses(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("crate") {
        let at = from + n;
        from = at + "crate".len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `x12gate_crate`, `some_crate`
        }
        let rest = code[from..].trim_start();
        let Some(rest) = rest.strip_prefix("::") else {
            continue;
        };
        let rest = rest.trim_start();
        let line = code[..at].matches('\n').count() + 1;
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(first_name(&item).map(|m| (line, m)));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            found.extend(first_name(&item).map(|m| (line, m)));
        } else {
            found.extend(first_name(rest).map(|m| (line, m)));
        }
    }
    found
}

fn first_name(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && name != "self").then_some(name)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_crate_path_points_down_the_layer_table() {
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let rows = table(&lib);
    let mut problems = Vec::new();
    for module in declared(&lib) {
        if !rows.contains_key(&module) {
            problems.push(format!(
                "src/lib.rs: module `{module}` is on no row of the layer table"
            ));
        }
    }
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let shown = format!("src/{}", rel.display());
        let top = rel.iter().next().unwrap().to_string_lossy();
        let module = top.strip_suffix(".rs").unwrap_or(&top);
        if module == "bin" || module == "lib" {
            continue;
        }
        let Some(&row) = rows.get(module) else {
            problems.push(format!(
                "{shown}: module `{module}` is on no row of the layer table"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, used) in uses(&code_only(&text)) {
            if used == module {
                continue;
            }
            match rows.get(&used) {
                None => problems.push(format!(
                    "{shown}:{line}: `{module}` uses `crate::{used}`, which is on no row of the layer table"
                )),
                Some(&to) if to >= row => problems.push(format!(
                    "{shown}:{line}: `{module}` (row {row}) uses `{used}` (row {to}): a module may use only modules on earlier rows"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the layer table in src/lib.rs is broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_and_groups_and_nothing_in_comments_or_strings() {
    let code = code_only(
        "use crate::{a, b::{c, d}, self};\n// crate::e\nlet s = \"crate::f\";\nlet r = r#\"crate::g\"#;\nlet c = '\"'; x::<'a>(crate::h::i);\n$crate::j",
    );
    let seen: Vec<(usize, String)> = uses(&code);
    let names: Vec<(usize, &str)> = seen.iter().map(|(l, m)| (*l, m.as_str())).collect();
    assert_eq!(names, [(1, "a"), (1, "b"), (5, "h"), (6, "j")]);
}
