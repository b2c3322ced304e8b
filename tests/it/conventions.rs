//! The table of Terraform's conventions in docs/reference/commands.md, row
//! by row: each row's command runs, in the table's order, in one copy of
//! examples/ (the simulator), and must exit and print as its last column says.

use std::path::Path;
use std::process::Command;

struct Row {
    terraform: String,
    command: String,
    exit: i32,
    prints: Option<String>,
}

/// The text between the first pair of backticks in a cell.
fn code(cell: &str) -> Option<String> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(cell[start..start + len].to_string())
}

/// Cells of a table row, split on the `|` outside backticks.
fn cells(line: &str) -> Vec<String> {
    let (mut out, mut cell, mut quoted) = (Vec::new(), String::new(), false);
    for ch in line.trim().trim_matches('|').chars() {
        match ch {
            '`' => {
                quoted = !quoted;
                cell.push(ch);
            }
            '|' if !quoted => out.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(ch),
        }
    }
    out.push(cell.trim().to_string());
    out
}

fn rows() -> Vec<Row> {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/commands.md"),
    )
    .unwrap();
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with("Terraform's conventions"))
        .expect("docs/reference/commands.md has a section \"Terraform's conventions\"");
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')).skip(2) {
        let c = cells(line);
        assert_eq!(c.len(), 5, "a row of five cells: {line}");
        let gives = &c[4];
        let exit = gives
            .strip_prefix("exit ")
            .and_then(|r| r.split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the last cell starts with `exit N`: {line}"));
        rows.push(Row {
            terraform: c[0].clone(),
            command: code(&c[3]).unwrap_or_else(|| panic!("the run cell is `code`: {line}")),
            exit,
            prints: gives.split_once(',').and_then(|(_, rest)| code(rest)),
        });
    }
    rows
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        // A local run's state, and the plug-in's Python, are not the example.
        if name == ".poolwright" || name == "plugins" {
            continue;
        }
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

#[test]
fn every_row_of_the_terraform_conventions_table_does_what_it_says() {
    let rows = rows();
    assert!(rows.len() >= 10, "the table has {} rows", rows.len());
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("repo");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        &work,
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_poolwright"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut wrong = Vec::new();
    for row in &rows {
        let o = Command::new("sh")
            .args(["-c", &row.command])
            .current_dir(&work)
            .env("PATH", &path)
            .env_remove("POOLWRIGHT_STATE_DIR")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let exit_ok = o.status.code() == Some(row.exit);
        let prints_ok = row
            .prints
            .as_ref()
            .is_none_or(|p| said.contains(p.as_str()));
        if !(exit_ok && prints_ok) {
            wrong.push(format!(
                "{} (`{}`): want exit {}{}, got exit {:?}:\n{said}",
                row.terraform,
                row.command,
                row.exit,
                row.prints
                    .as_ref()
                    .map(|p| format!(" printing `{p}`"))
                    .unwrap_or_default(),
                o.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
