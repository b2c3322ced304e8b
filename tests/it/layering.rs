//! The pure core imports nothing from the shell: the rollout core, the
//! planner, the disruption policy, the documents and the vocabulary never
//! reach the network, the disk or a clock through another module
//! (docs/ARCHITECTURE.md, "Layers").

use std::path::{Path, PathBuf};

/// Modules of the imperative shell.
const SHELL: &[&str] = &[
    "reconcile",
    "daemon",
    "cli",
    "provider",
    "cluster",
    "store",
    "gitrev",
    "files",
    "desired_dir",
];

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

/// Every `crate::MODULE` a file names (in `use` lines and inline paths).
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for piece in code.split("crate::").skip(1) {
            let module: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((i + 1, module));
        }
        // `use crate::{a, b}` names several at once.
        if let Some(rest) = code.split("crate::{").nth(1) {
            for name in rest.split([',', '}']) {
                let module: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !module.is_empty() {
                    out.push((i + 1, module));
                }
            }
        }
    }
    out
}

#[test]
fn the_pure_core_imports_nothing_from_the_shell() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for core in ["rollout", "plan", "policy", "spec", "model"] {
        sources(&src.join(core), &mut files);
    }
    files.push(src.join("clock.rs"));
    assert!(files.len() > 10, "the core's sources were found: {files:?}");
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, module) in crate_refs(&text) {
            if SHELL.contains(&module.as_str()) {
                violations.push(format!(
                    "{}:{line}: crate::{module}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the pure core reaches into the shell:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_itself_sees_an_import() {
    let refs = crate_refs("use crate::store::Journal;\nuse crate::{model, reconcile::x};\n");
    let names: Vec<&str> = refs.iter().map(|(_, m)| m.as_str()).collect();
    assert!(
        names.contains(&"store") && names.contains(&"reconcile"),
        "{names:?}"
    );
}
