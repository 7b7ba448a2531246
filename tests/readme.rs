//! The README's worked example and the examples of `docs/`, run as a reader would run them:
//! each `$` line of a `console` block in a fresh folder with the example `partners.toml`
//! (and `fixtures/`, `examples/` beside it), its output compared with the text's. What
//! changes from run to run (our envelope's date and time, the times an output prints, a
//! registry's random installation id, the temporary folder) is compared as a placeholder;
//! everything else byte for byte. Every `console` block of the README and of `docs/` is run
//! here: an example that is only an illustration is fenced as `text`, and says so.

use crate::util::root;

/// The console blocks that are run: the file, and the text just before the block (a heading,
/// or a line unique in the file).
const EXECUTED: &[(&str, &str)] = &[
    ("README.md", "## A worked example"),
    ("docs/registry.md", "### Example: the checks before work"),
    (
        "docs/operations.md",
        "### Example: a partner we had not configured yet",
    ),
    ("docs/documents.md", "### Example: a PO sent again"),
    (
        "docs/documents.md",
        "### Example: an old archive scanned, then backfilled",
    ),
    ("docs/guides.md", "### Example: ACME's guide"),
    ("README.md", "## Sending our own documents"),
];

/// The `console` block after `heading` in `text`: each command with the lines it prints.
fn session(text: &str, heading: &str) -> Vec<(String, Vec<String>)> {
    let after = text
        .split_once(heading)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let block = after
        .split_once("```console\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("{heading:?} has no console block"));
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command.to_string(), Vec::new()));
        } else if let Some((_, printed)) = steps.last_mut() {
            printed.push(line.to_string());
        }
    }
    for (_, printed) in &mut steps {
        while printed.last().is_some_and(|l| l.trim().is_empty()) {
            printed.pop();
        }
    }
    steps
}

/// An X12 line with the date and time of our ISA (09, 10) or GS (04, 05) blanked; any other
/// line as it is. The element separator is the byte after the segment's id.
fn envelope_times(line: &str) -> Option<String> {
    let blank = |id: &str, at: &[usize]| {
        let sep = line
            .as_bytes()
            .get(id.len())
            .map_or('*', |b| char::from(*b));
        line.split(sep)
            .enumerate()
            .map(|(i, e)| if at.contains(&i) { "#" } else { e })
            .collect::<Vec<_>>()
            .join(&sep.to_string())
    };
    if line.starts_with("ISA") {
        return Some(blank("ISA", &[9, 10]));
    }
    if line.starts_with("GS") {
        return Some(blank("GS", &[4, 5]));
    }
    None
}

/// The README's line with what varies between runs replaced: the date and time of our ISA
/// and GS, a leading RFC 3339 time, the folder the example ran in.
fn normal(line: &str, folder: &str) -> String {
    let line = line.replace(folder, "/tmp/ex");
    let line = line.trim_end();
    if let Some(x12) = envelope_times(line) {
        return x12;
    }
    match line.split_once(' ') {
        Some((first, rest)) if chrono::DateTime::parse_from_rfc3339(first).is_ok() => {
            format!("<time> {rest}")
        }
        _ => line.to_string(),
    }
}

/// A chapter's line, where more varies than in the README's: X12 lines may be indented
/// (`show` prints the acknowledgments it sent), an RFC 3339 time may stand anywhere (in
/// parentheses, before a `;` or `,`), and `init` prints the registry's random installation id.
fn normal_anywhere(line: &str, folder: &str) -> String {
    let line = line.replace(folder, "/tmp/ex");
    let line = line.trim_end();
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    if let Some(x12) = envelope_times(body) {
        return format!("{indent}{x12}");
    }
    let mut previous = "";
    let words: Vec<String> = body
        .split(' ')
        .map(|word| {
            let core = word
                .trim_start_matches('(')
                .trim_end_matches([')', ';', ',']);
            let out = if previous.ends_with("installation")
                && !core.is_empty()
                && core.bytes().all(|b| b.is_ascii_hexdigit())
            {
                word.replace(core, "<id>")
            } else if chrono::DateTime::parse_from_rfc3339(core).is_ok() {
                word.replace(core, "<time>")
            } else {
                word.to_string()
            };
            previous = word;
            out
        })
        .collect();
    format!("{indent}{}", words.join(" "))
}

/// Runs the console block under `heading` of `file` and compares what each command prints.
fn run(file: &str, heading: &str) {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let steps = session(&text, heading);
    assert!(!steps.is_empty(), "{file}: {heading:?} lost its commands");
    let normalise = if file == "README.md" {
        normal
    } else {
        normal_anywhere
    };
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().to_string_lossy().into_owned();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    for shared in ["fixtures", "examples"] {
        std::os::unix::fs::symlink(root().join(shared), dir.path().join(shared)).unwrap();
    }
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_x12gate"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (command, printed) in steps {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| normalise(l, &folder))
            .collect();
        let want: Vec<String> = printed.iter().map(|l| normalise(l, &folder)).collect();
        assert_eq!(
            got,
            want,
            "{file}: `$ {command}` printed otherwise (stderr: {})",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_worked_example_prints_what_the_readme_says() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        session(&readme, "## A worked example").len() >= 5,
        "the worked example lost its commands"
    );
    run("README.md", "## A worked example");
}

#[test]
fn the_registry_chapter_prints_what_it_says() {
    run("docs/registry.md", "### Example: the checks before work");
}

#[test]
fn the_operations_chapter_prints_what_it_says() {
    run(
        "docs/operations.md",
        "### Example: a partner we had not configured yet",
    );
}

#[test]
fn the_documents_chapter_prints_what_it_says() {
    run("docs/documents.md", "### Example: a PO sent again");
}

#[test]
fn the_documents_chapters_scan_prints_what_it_says() {
    run(
        "docs/documents.md",
        "### Example: an old archive scanned, then backfilled",
    );
}

#[test]
fn the_readme_s_outbound_example_prints_what_it_says() {
    run("README.md", "## Sending our own documents");
}

#[test]
fn the_guides_chapter_prints_what_it_says() {
    run("docs/guides.md", "### Example: ACME's guide");
}

/// A `console` block nobody runs could drift unseen: each one is in `EXECUTED`, and the
/// rest of the examples are fenced otherwise.
#[test]
fn every_console_block_of_the_readme_and_the_docs_is_run() {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    for path in files {
        let name = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let blocks = std::fs::read_to_string(&path)
            .unwrap()
            .matches("```console\n")
            .count();
        let run = EXECUTED.iter().filter(|(file, _)| *file == name).count();
        assert_eq!(
            blocks, run,
            "{name}: {blocks} console block(s), {run} run by tests/readme.rs"
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Moving text between chapters breaks links silently: each relative link of the README
/// and of `docs/` names a file that exists and, with `#`, a heading in it.
#[test]
fn every_link_of_the_readme_and_the_docs_resolves() {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (_, rest) in text.match_indices("](").map(|(i, _)| text.split_at(i + 2)) {
            let Some(target) = rest.split_once(')').map(|(t, _)| t) else {
                continue;
            };
            if target.contains("://") || target.contains(' ') || target.is_empty() {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            assert!(
                linked.exists(),
                "{}: the link {target:?} names no file",
                path.display()
            );
            if !fragment.is_empty() {
                let headings: Vec<String> = std::fs::read_to_string(&linked)
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|l| anchor(l.trim_start_matches('#')))
                    .collect();
                assert!(
                    headings.iter().any(|h| h == fragment),
                    "{}: the link {target:?} names no heading of {}",
                    path.display(),
                    linked.display()
                );
            }
        }
    }
}

/// The README's command table names every subcommand `x12gate --help` lists, and docs/commands.md
/// describes each.
#[test]
fn the_command_tables_name_every_subcommand() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<&str> = help
        .split_once("Commands:\n")
        .map(|(_, rest)| rest)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.len() >= 20, "--help lists {commands:?}");
    for file in ["README.md", "docs/commands.md"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for name in &commands {
            assert!(
                text.contains(&format!("| `{name} ")) || text.contains(&format!("| `{name}` |")),
                "{file}: the command table has no row for `{name}`"
            );
        }
    }
}

/// Each `toml` block of the docs that declares partners or destinations is a configuration
/// that loads: under a minimal `[gateway]`, `x12gate check` finds no problem in it. (A
/// block of `[gateway]` keys for PostgreSQL needs a server, and is left to the nodes' tests.)
#[test]
fn every_configuration_example_of_the_docs_loads() {
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (_, rest) in text
            .match_indices("```toml\n")
            .map(|(i, _)| text.split_at(i + 8))
        {
            let block = rest.split_once("\n```").map_or(rest, |(b, _)| b);
            if block.contains("[gateway]") || block.contains("postgres://") {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("partners.toml");
            std::fs::write(
                &config,
                format!("[gateway]\nid_qualifier = \"ZZ\"\nid = \"X12GATE\"\n\n{block}\n"),
            )
            .unwrap();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
                .arg("--config")
                .arg(&config)
                .arg("check")
                .current_dir(dir.path())
                .env("ERP_TOKEN", "Bearer example")
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: a configuration example does not load: {}{}",
                path.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 2,
        "the delivery chapter lost its configuration examples"
    );
}

/// The generic form's example in docs/json.md is exactly what `parse --raw` makes of the X12
/// that `render` writes from it: the example is a real document, not a sketch of one.
#[test]
fn the_json_chapters_generic_example_round_trips() {
    let text = std::fs::read_to_string(root().join("docs/json.md")).unwrap();
    let example = text
        .split_once("```json\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("example.json"), example).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_x12gate"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        out.stdout
    };
    let x12 = run(&["render", "example.json"]);
    std::fs::write(dir.path().join("example.x12"), x12).unwrap();
    let parsed: serde_json::Value =
        serde_json::from_slice(&run(&["parse", "--raw", "example.x12"])).unwrap();
    let shown: serde_json::Value = serde_json::from_str(example).unwrap();
    assert_eq!(
        parsed, shown,
        "docs/json.md's example is not what parse makes"
    );
}
