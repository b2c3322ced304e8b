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

/// The leading identifier of `s`.
fn ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Every top-level module a file names, by line, outside comments and test
/// modules: `crate::MODULE` (in `use` lines and inline paths), each name of
/// a `use crate::{a, b::{..}}` group however many lines it spans, and a
/// `super::super::MODULE` path that climbs out of the file's top-level
/// module (`depth`: how many modules deep the file is, `src/a/b.rs` 2).
fn crate_refs(text: &str, depth: usize) -> Vec<(usize, String)> {
    refs_under(text, "crate::", depth)
}

/// As [`crate_refs`], for the modules under `prefix` (`crate::daemon::`):
/// `depth` counts from that module.
fn refs_under(text: &str, prefix: &str, depth: usize) -> Vec<(usize, String)> {
    let text = without_tests(text);
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The names at the group's top level.
            let mut level = 0usize;
            let mut expect = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => expect = true,
                    c if expect && (c.is_ascii_alphanumeric() || c == '_') => {
                        expect = false;
                        let name = ident(&group[i..]);
                        let pos = at + prefix.len() + 1 + i;
                        out.push((line_of(pos), name));
                    }
                    _ => {}
                }
            }
        } else {
            let module = ident(rest);
            if !module.is_empty() {
                out.push((line_of(at), module));
            }
        }
    }
    // `super::` chains that leave the top-level module name another one.
    let mut from = 0;
    while let Some(found) = code[from..].find("super::") {
        let at = from + found;
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            from = at + 1;
            continue;
        }
        let mut rest = &code[at..];
        let mut supers = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            supers += 1;
            rest = r;
        }
        if supers >= depth {
            let module = ident(rest);
            if !module.is_empty() {
                out.push((line_of(at), module));
            }
        }
        from = at + supers * "super::".len();
    }
    out
}

/// How many modules deep a file under `src/` is: `src/a.rs` 1,
/// `src/a/mod.rs` 1, `src/a/b.rs` 2.
fn depth(src: &Path, file: &Path) -> usize {
    let rel = file.strip_prefix(src).unwrap();
    let parts = rel.components().count();
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// The table of `docs/ARCHITECTURE.md`: `| module | may import |` rows.
fn table() -> BTreeMap<String, BTreeSet<String>> {
    rows(false)
}

/// Its rows for the top-level modules, or (`rooms`) for the daemon's rooms
/// (`daemon::run`, ...).
fn rows(rooms: bool) -> BTreeMap<String, BTreeSet<String>> {
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
        if module.contains("::") != rooms {
            continue;
        }
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
            for (line, target) in crate_refs(&text, depth(&src, file)) {
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
        2,
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
    // A group over several lines, nested groups, and `super::` out of the
    // top-level module (a file two deep: two `super::` reach the crate).
    let refs = crate_refs(
        "use crate::{\n    clock::Clock,\n    fleet::{a, b},\n    git,\n};\nuse super::sibling;\nlet x = super::super::policy::f();\n",
        2,
    );
    let names: Vec<(usize, &str)> = refs.iter().map(|(l, m)| (*l, m.as_str())).collect();
    for want in [(2, "clock"), (3, "fleet"), (4, "git"), (7, "policy")] {
        assert!(names.contains(&want), "{want:?} in {names:?}");
    }
    assert!(
        !names.iter().any(|(_, m)| ["sibling", "a", "b"].contains(m)),
        "{names:?}"
    );
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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon/run/reconciler");
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

/// One name for one thing: two public types of the same name in different
/// modules (two `FleetView`s, two `Hold`s) make a reader guess which is
/// meant. Each pair that remains is listed here with why it may stay; a new
/// one fails until it is renamed or justified.
#[test]
fn no_two_public_types_share_a_name_unless_justified() {
    const JUSTIFIED: &[(&str, &str)] = &[
        (
            "Answer",
            "private to their transports (plug-in HTTP, git fetch)",
        ),
        (
            "Board",
            "the daemon's status board; a preview's is its own board",
        ),
        (
            "Capabilities",
            "the plug-in wire form of the provider model's",
        ),
        (
            "Change",
            "a fleet change; the shared store's compare-and-swap closure",
        ),
        (
            "Decision",
            "each pure decide returns its own (rollout, fleet): one shape",
        ),
        (
            "Gate",
            "a FleetRollout gate's spec; a disruption policy's gate",
        ),
        (
            "Inputs",
            "each pure decide reads its own (rollout, fleet): one shape",
        ),
        (
            "Limits",
            "load limits, listener limits, forecast limits: each its module's",
        ),
        ("NodeState", "the plug-in wire form of the model's"),
        (
            "NodeView",
            "the plug-in wire form; the Kubernetes node as read",
        ),
        (
            "Note",
            "each pure core's note for its shell (images, rollout)",
        ),
        ("Options", "plugin check's options; the daemon's"),
        (
            "Outcome",
            "the rollout decision's outcome; apply's report outcome",
        ),
        (
            "Preflight",
            "the spec's drain.preflight setting; the plan's finding",
        ),
        (
            "Problem",
            "staging's problem; the plug-in wire's problem document",
        ),
        ("Record", "a lease record; a shared-store record"),
        (
            "Refused",
            "each command's refusal (client, rollout control, git hook)",
        ),
        ("Report", "plugin check's report; apply's report"),
        (
            "Request",
            "each command's request (git fetch worker, doctor, forecast)",
        ),
        (
            "Summary",
            "a plan's summary; a fleet change's summary in its history",
        ),
        (
            "Value",
            "a rollout order's key value; a plan attribute's value",
        ),
        (
            "Verdict",
            "plugin check's, doctor's, and a fleet change's verdict on a pool",
        ),
        ("View", "a shard view; the apply progress view"),
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut by_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = without_tests(&std::fs::read_to_string(file).unwrap());
        for line in text.lines() {
            for kind in ["pub struct ", "pub enum ", "pub type ", "pub trait "] {
                if let Some(rest) = line.strip_prefix(kind) {
                    let name = ident(rest);
                    if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                        by_name
                            .entry(name)
                            .or_default()
                            .insert(file.strip_prefix(&src).unwrap().display().to_string());
                    }
                }
            }
        }
    }
    let shared: Vec<String> = by_name
        .iter()
        .filter(|(name, files)| files.len() > 1 && !JUSTIFIED.iter().any(|(n, _)| n == *name))
        .map(|(name, files)| format!("{name}: {files:?}"))
        .collect();
    assert!(
        shared.is_empty(),
        "public types sharing a name (rename one, or say in JUSTIFIED why both stay):\n{}",
        shared.join("\n")
    );
    let stale: Vec<&str> = JUSTIFIED
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| by_name.get(*n).is_none_or(|f| f.len() < 2))
        .collect();
    assert!(
        stale.is_empty(),
        "justified but no longer shared: {stale:?}"
    );
}

/// The daemon is in rooms (`run`, `serve`, `views`, `source`, and the CLI's
/// `client`), layered as the crate is: each room imports only the rooms its
/// `daemon::ROOM` row of the table names. The daemon's own root (`mod.rs`,
/// the wiring, the loop's turns, shutdown) composes them all.
#[test]
fn each_daemon_room_imports_only_what_the_layers_table_allows() {
    let daemon = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon");
    let table = rows(true);
    let rooms: BTreeMap<String, Vec<PathBuf>> = modules(&daemon)
        .into_iter()
        .filter(|(name, _)| !["mod", "wiring", "turns", "shutdown"].contains(&name.as_str()))
        .collect();
    let missing: Vec<&String> = rooms
        .keys()
        .filter(|r| !table.contains_key(&format!("daemon::{r}")))
        .collect();
    assert!(
        missing.is_empty(),
        "daemon rooms missing from the table in docs/ARCHITECTURE.md: {missing:?}"
    );
    let mut violations = Vec::new();
    for (room, files) in &rooms {
        let allowed = &table[&format!("daemon::{room}")];
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            for (line, target) in refs_under(&text, "crate::daemon::", depth(&daemon, file)) {
                if &target != room
                    && rooms.contains_key(&target)
                    && !allowed.contains(&format!("daemon::{target}"))
                {
                    violations.push(format!(
                        "{}:{line}: daemon::{room} -> daemon::{target}",
                        file.strip_prefix(&daemon).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "arrows between the daemon's rooms the layers table does not allow:\n{}",
        violations.join("\n")
    );
}
