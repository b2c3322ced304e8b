//! The official YAML test suite (tests/data/yaml-test-suite, generated from
//! the suite's data release under its MIT licence) through poolwright's
//! loader: every case the suite marks invalid fails with a located error and
//! yields no document, and every valid case loads or fails only on
//! poolwright's own schema; never on YAML itself, and never because the
//! documents of a stream could not be separated (which proves the `---`
//! splitter against the whole suite).

use poolwright::spec::Limits;
use poolwright::spec::load::{SourceFile, parse_file};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    id: String,
    name: String,
    fail: bool,
    yaml: String,
}

fn cases() -> Vec<Case> {
    let text = include_str!("../data/yaml-test-suite/cases.json");
    let cases: Vec<Case> = serde_json::from_str(text).unwrap();
    assert!(cases.len() > 400, "the suite is all there: {}", cases.len());
    cases
}

/// What the YAML layer itself says (as opposed to poolwright's schema).
fn is_yaml_error(message: &str) -> bool {
    message.starts_with("not valid YAML") || message.starts_with("cannot separate the documents")
}

#[test]
fn every_invalid_case_is_refused_with_a_located_error() {
    let limits = Limits::default();
    let mut accepted = Vec::new();
    let mut total = 0;
    for case in cases().iter().filter(|c| c.fail) {
        total += 1;
        let file = SourceFile {
            display: format!("{}.yaml", case.id),
            bytes: case.yaml.clone().into_bytes(),
        };
        let (docs, diags) = parse_file(&file, &limits);
        let located = diags.iter().any(|d| {
            d.line >= 1
                && d.column >= 1
                && d.file == file.display
                && d.severity.to_string() == "error"
        });
        if !located || !docs.is_empty() {
            accepted.push(format!("{} ({}): {diags:?}", case.id, case.name));
        }
    }
    assert!(total >= 90, "{total} invalid cases");
    assert!(
        accepted.is_empty(),
        "{} of {total} invalid YAML inputs were not refused with a located error:\n{}",
        accepted.len(),
        accepted.join("\n")
    );
}

#[test]
fn the_four_cases_the_red_team_found_are_refused_where_they_go_wrong() {
    let limits = Limits::default();
    let by_id = cases();
    for (id, line) in [("3HFZ", 3), ("9C9N", 3), ("QB6E", 3), ("DK95-01", 2)] {
        let case = by_id.iter().find(|c| c.id == id).unwrap();
        assert!(case.fail);
        let file = SourceFile {
            display: format!("{id}.yaml"),
            bytes: case.yaml.clone().into_bytes(),
        };
        let (docs, diags) = parse_file(&file, &limits);
        assert!(docs.is_empty(), "{id}");
        assert_eq!(diags.len(), 1, "{id}: {diags:?}");
        assert_eq!(diags[0].line, line, "{id}: {}", diags[0]);
        assert!(is_yaml_error(&diags[0].message), "{id}: {}", diags[0]);
    }
}

#[test]
fn every_valid_case_loads_or_fails_only_on_poolwrights_schema() {
    let limits = Limits::default();
    let mut refused = Vec::new();
    let mut total = 0;
    for case in cases().iter().filter(|c| !c.fail) {
        total += 1;
        let file = SourceFile {
            display: format!("{}.yaml", case.id),
            bytes: case.yaml.clone().into_bytes(),
        };
        let (_, diags) = parse_file(&file, &limits);
        for d in diags.iter().filter(|d| is_yaml_error(&d.message)) {
            refused.push(format!("{} ({}): {d}", case.id, case.name));
        }
    }
    assert!(total >= 300, "{total} valid cases");
    assert!(
        refused.is_empty(),
        "{} valid YAML inputs were refused as YAML:\n{}",
        refused.len(),
        refused.join("\n")
    );
}
