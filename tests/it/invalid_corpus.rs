//! The invalid-document corpus: every case under `tests/invalid/` must produce
//! exactly the diagnostics it lists (position, severity and message), and no
//! config, so nothing could act on it.
//!
//! A file case lists them in trailing `# expect: LINE:COL: severity: message`
//! comments; a directory case lists `FILE:LINE:COL: severity: message` lines in
//! its `expected.txt`.

use std::path::{Path, PathBuf};

use poolwright::desired_dir::load_dir;
use poolwright::spec::Limits;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/invalid")
}

fn actual(root: &Path) -> Vec<String> {
    let report = load_dir(root, &Limits::default());
    assert!(
        report.config.is_none(),
        "{}: an invalid case must not yield a config",
        root.display()
    );
    // Diagnostics name files as `<corpus>/<case>...`; expectations are written
    // relative to the case (its file name is implied for a file case).
    let parent = format!("{}/", root.parent().unwrap().display());
    let name = root.file_name().unwrap().to_string_lossy().into_owned();
    let lead = if root.is_dir() {
        format!("{name}/")
    } else {
        format!("{name}:")
    };
    report
        .diagnostics
        .iter()
        .map(|d| {
            let line = d.to_string().replace(&parent, "");
            line.strip_prefix(&lead).unwrap_or(&line).to_string()
        })
        .collect()
}

fn expected(case: &Path) -> Vec<String> {
    if case.is_dir() {
        let text = std::fs::read_to_string(case.join("expected.txt")).unwrap();
        text.lines().map(str::to_string).collect()
    } else {
        let text = std::fs::read_to_string(case).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn every_invalid_case_reports_exactly_its_expected_diagnostics() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 25, "the corpus must hold at least 25 cases");
    let mut failures = Vec::new();
    for case in &cases {
        let want = expected(case);
        assert!(!want.is_empty(), "{} lists no expectation", case.display());
        let got = actual(case);
        if got != want {
            failures.push(format!(
                "{}\n  expected: {want:#?}\n  got:      {got:#?}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn several_documents_report_all_their_errors_at_once() {
    let got = actual(&corpus_dir().join("several-errors-in-one-file.yaml"));
    assert_eq!(got.len(), 4, "{got:#?}");
}

#[test]
fn one_document_reports_all_its_structural_errors_at_once() {
    let got = actual(&corpus_dir().join("several-structural-errors-in-one-document.yaml"));
    let lines: Vec<&str> = got.iter().map(|d| d.split(':').next().unwrap()).collect();
    assert_eq!(lines, ["15", "17", "18", "20", "24", "25"], "{got:#?}");
}
