//! The README's worked example, run as a reader would run it: each `$` line of its console
//! block in a fresh folder with the example `partners.toml`, its output compared with the
//! README's. What changes from run to run (our envelope's date and time, the history's
//! times, the temporary folder) is compared as a placeholder; everything else byte for byte.

use crate::util::root;

/// The README's `console` block under `heading`: each command with the lines it prints.
fn session(readme: &str, heading: &str) -> Vec<(String, Vec<String>)> {
    let after = readme
        .split_once(heading)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
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

/// A line with what varies between runs replaced: the date and time of our ISA (09, 10) and
/// GS (04, 05), a leading RFC 3339 time, the folder the example ran in.
fn normal(line: &str, folder: &str) -> String {
    let line = line.replace(folder, "/tmp/ex");
    let line = line.trim_end();
    // The element separator is the byte after the segment's id.
    let blank = |line: &str, id: &str, at: &[usize]| {
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
        return blank(line, "ISA", &[9, 10]);
    }
    if line.starts_with("GS") {
        return blank(line, "GS", &[4, 5]);
    }
    match line.split_once(' ') {
        Some((first, rest)) if chrono::DateTime::parse_from_rfc3339(first).is_ok() => {
            format!("<time> {rest}")
        }
        _ => line.to_string(),
    }
}

#[test]
fn the_worked_example_prints_what_the_readme_says() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let steps = session(&readme, "## A worked example");
    assert!(steps.len() >= 5, "the worked example lost its commands");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().to_string_lossy().into_owned();
    std::fs::copy(
        root().join("partners.toml"),
        dir.path().join("partners.toml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(root().join("fixtures"), dir.path().join("fixtures")).unwrap();
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
            .map(|l| normal(l, &folder))
            .collect();
        let want: Vec<String> = printed.iter().map(|l| normal(l, &folder)).collect();
        assert_eq!(
            got,
            want,
            "README: `$ {command}` printed otherwise (stderr: {})",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
