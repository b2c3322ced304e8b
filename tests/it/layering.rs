//! The modules are layered, and the layers are a table: for every top-level
//! module of `src/`, the modules it may import. The table is the "Layers"
//! section of `docs/ARCHITECTURE.md`, read from there, so the document and
//! the code cannot disagree. Any other arrow fails here, naming the file
//! and line; so does an arrow the table allows that would close a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The text with its `#[cfg(test)] mod NAME { ... }` blocks blanked (lines
/// kept, so line numbers still match): tests may reach anywhere.
fn without_tests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_mod = trimmed.starts_with("mod ")
            || trimmed.starts_with("pub mod ")
            || trimmed.starts_with("pub(crate) mod ");
        let Some(open) = after.find('{').filter(|_| is_mod) else {
            out.push_str(&rest[..at + "#[cfg(test)]".len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        let body = &after[open..];
        let mut depth = 0usize;
        let mut end = body.len();
        for (k, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let skipped = &rest[at..at + "#[cfg(test)]".len() + open + end];
        out.extend(skipped.chars().filter(|c| *c == '\n'));
        rest = &rest[at + "#[cfg(test)]".len() + open + end..];
    }
    out.push_str(rest);
    out
}

/// Every `crate::MODULE` a file names (in `use` lines and inline paths),
/// outside comments and test modules.
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let text = without_tests(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for piece in code.split("crate::").skip(1) {
            let module: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !module.is_empty() {
                out.push((i + 1, module));
            }
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

/// The table of `docs/ARCHITECTURE.md`: `| module | may import |` rows.
fn table() -> BTreeMap<String, BTreeSet<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let section = doc
        .split("## Layers")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a Layers section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut out = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `module` | `a`, `b` | what it is |
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let module = cells[1].trim_matches('`').to_string();
        let allowed = cells[2]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .filter(|m| !m.is_empty() && m != "nothing")
            .collect();
        out.insert(module, allowed);
    }
    out
}

/// The top-level modules of `src/` (directories and files but the roots).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        let mut files = Vec::new();
        if path.is_dir() {
            sources(&path, &mut files);
        } else {
            files.push(path.clone());
        }
        out.insert(name, files);
    }
    out
}

#[test]
fn every_module_imports_only_what_the_layers_table_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let table = table();
    let modules = modules(&src);
    let missing: Vec<&String> = modules.keys().filter(|m| !table.contains_key(*m)).collect();
    assert!(
        missing.is_empty(),
        "modules missing from the table in docs/ARCHITECTURE.md: {missing:?}"
    );
    let mut violations = Vec::new();
    for (module, files) in &modules {
        let allowed = &table[module];
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            for (line, target) in crate_refs(&text) {
                if &target != module && modules.contains_key(&target) && !allowed.contains(&target)
                {
                    violations.push(format!(
                        "{}:{line}: {module} -> {target}",
                        file.strip_prefix(&src).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "arrows the layers table (docs/ARCHITECTURE.md) does not allow:\n{}",
        violations.join("\n")
    );
}

/// The table itself is layered: no module may reach, through what it may
/// import, back to itself.
#[test]
fn the_layers_table_has_no_cycle() {
    let table = table();
    for start in table.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = table[start].iter().collect();
        while let Some(m) = stack.pop() {
            assert_ne!(m, start, "the layers table lets {start} reach itself");
            if seen.insert(m.clone())
                && let Some(next) = table.get(m)
            {
                stack.extend(next);
            }
        }
    }
}

#[test]
fn the_check_itself_sees_an_import() {
    let refs = crate_refs(
        "use crate::store::Journal;\nuse crate::{model, reconcile::x};\n#[cfg(test)]\nmod tests {\n    use crate::daemon::x;\n}\nuse crate::ha::y;\n",
    );
    let names: Vec<(usize, &str)> = refs.iter().map(|(l, m)| (*l, m.as_str())).collect();
    assert!(
        names.contains(&(1, "store")) && names.contains(&(2, "reconcile")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|(_, m)| *m == "daemon"),
        "a test module's imports are not arrows: {names:?}"
    );
    assert!(names.contains(&(7, "ha")), "lines still match: {names:?}");
}

/// The reconciler's parts are types with their own small API: outside the
/// file that defines a part, the reconciler calls its methods and never
/// reads or writes its fields (`self.fleet.driver...` from `batch.rs` was the
/// last such reach).
#[test]
fn no_reconciler_file_reaches_into_another_parts_fields() {
    const PARTS: [(&str, &str); 6] = [
        ("schedule", "schedule.rs"),
        ("authority", "authority.rs"),
        ("workers", "workers.rs"),
        ("views", "publish.rs"),
        ("blocks", "projection.rs"),
        ("fleet", "fleet.rs"),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon/reconciler");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    assert!(files.len() >= 8, "the reconciler's files: {files:?}");
    let mut reaches = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let text = without_tests(&std::fs::read_to_string(file).unwrap());
        for (part, home) in PARTS {
            if name == home {
                continue;
            }
            let needle = format!("self.{part}.");
            for (at, _) in text.match_indices(&needle) {
                let rest = &text[at + needle.len()..];
                let ident: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // A method call (`self.fleet.view()`) is the part's API.
                let called =
                    rest[ident.len()..].starts_with('(') || rest[ident.len()..].starts_with("::");
                if !called {
                    let line = text[..at].lines().count();
                    reaches.push(format!("{name}:{line}: self.{part}.{ident}"));
                }
            }
        }
    }
    assert!(
        reaches.is_empty(),
        "fields of a reconciler part read from another file:\n{}",
        reaches.join("\n")
    );
}
