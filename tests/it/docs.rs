//! The documentation as a reader meets it: every relative link and anchor of
//! README.md, CONTRIBUTING.md and docs/ leads somewhere, the book's table of
//! contents lists every page, every YAML sample is a valid desired state,
//! and the command samples whose output is shown give that output.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, CONTRIBUTING.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("CONTRIBUTING.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// The text outside fenced code blocks (links in code are not links).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .map(|l| {
            // Inline code spans are not links either.
            let mut out = String::new();
            let mut code = false;
            for c in l.chars() {
                if c == '`' {
                    code = !code;
                } else if !code {
                    out.push(c);
                }
            }
            out + "\n"
        })
        .collect()
}

/// The targets of `[text](target)` links and `![alt](target)` images.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's and mdBook's anchor of a heading: lower case, spaces to `-`,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
            }
            !fenced
        })
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 20, "the book's pages: {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in links(&prose(&text)) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let shown = page.strip_prefix(root()).unwrap().display();
            if !target.exists() {
                broken.push(format!("{shown}: {link}: no such file"));
            } else if !frag.is_empty()
                && target.extension().is_some_and(|x| x == "md")
                && !anchors(&target).contains(frag)
            {
                broken.push(format!("{shown}: {link}: no such heading"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_books_table_of_contents_lists_every_page() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| docs.join(l)).collect();
    let missing: Vec<_> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&docs) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages not in docs/SUMMARY.md: {missing:?}"
    );
}

/// Each ```yaml block, with its page and line, and whether the line before
/// says it is not poolwright's YAML (a Kubernetes Role).
fn yaml_blocks() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim() == "```yaml" {
                let foreign = i > 0 && lines[i - 1].trim() == "<!-- not poolwright -->";
                let start = i + 1;
                let mut end = start;
                while end < lines.len() && !lines[end].starts_with("```") {
                    end += 1;
                }
                let at = format!("{}:{}", page.strip_prefix(root()).unwrap().display(), start);
                out.push((at, lines[start..end].join("\n") + "\n", foreign));
                i = end;
            }
            i += 1;
        }
    }
    out
}

#[test]
fn every_yaml_sample_is_a_valid_desired_state() {
    let blocks = yaml_blocks();
    assert!(blocks.len() >= 5, "the YAML samples: {blocks:?}");
    let mut wrong = Vec::new();
    for (at, yaml, foreign) in blocks {
        if foreign {
            // Still YAML a reader can paste.
            if let Err(e) = serde_saphyr::from_multiple::<serde_json::Value>(&yaml) {
                wrong.push(format!("{at}: not YAML: {e}"));
            }
            continue;
        }
        let dir = tempfile_dir();
        std::fs::write(dir.join("sample.yaml"), &yaml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .arg("validate")
            .arg(&dir)
            .output()
            .unwrap();
        if !out.status.success() {
            wrong.push(format!(
                "{at}:\n{}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(wrong.is_empty(), "invalid samples:\n{}", wrong.join("\n"));
}

fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "poolwright-docs-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `got` is `want`, where `...` in `want` stands for any text.
fn matches_elided(want: &str, got: &str) -> bool {
    let mut parts = want.split("...");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The validation sample the README and the tutorial show: the commands as
/// written (in a shell, from the checkout), the output as shown.
#[test]
fn the_validation_sample_gives_the_output_shown() {
    let mut found = 0;
    for page in [root().join("README.md"), root().join("docs/tutorial.md")] {
        let text = std::fs::read_to_string(&page).unwrap();
        let block = text
            .split("```sh\n")
            .filter_map(|b| b.split("\n```").next())
            .find(|b| b.contains("validate /tmp/web.yaml"))
            .unwrap_or_else(|| panic!("{} shows the validation sample", page.display()));
        found += 1;
        let dir = tempfile_dir();
        let file = dir.join("web.yaml");
        let (commands, shown): (Vec<&str>, Vec<&str>) =
            block.lines().partition(|l| !l.starts_with("# "));
        let bin = env!("CARGO_BIN_EXE_poolwright");
        let script = commands
            .join("\n")
            .replace("/tmp/web.yaml", &file.to_string_lossy())
            .replace("cargo run -q --", bin);
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", page.display());
        let got =
            String::from_utf8_lossy(&out.stderr).replace(&*file.to_string_lossy(), "/tmp/web.yaml");
        let got: Vec<&str> = got.lines().collect();
        assert_eq!(got.len(), shown.len(), "{}: {got:?}", page.display());
        for (want, got) in shown.iter().zip(&got) {
            let want = want.trim_start_matches("# ");
            assert!(
                matches_elided(want, got),
                "{}: shown {want:?}, printed {got:?}",
                page.display()
            );
        }
    }
    assert_eq!(found, 2);
}

/// Rewrites the generated pages when `POOLWRIGHT_BLESS=1`, else says how.
fn check_generated(page: &str, generated: &str) {
    let path = root().join(page);
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current == generated {
        return;
    }
    if std::env::var_os("POOLWRIGHT_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let first = current
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(current.lines().count().min(generated.lines().count()));
    panic!(
        "{page} is stale (first difference at line {}): regenerate it with \
         `POOLWRIGHT_BLESS=1 cargo test --test it docs::` and commit it",
        first + 1
    );
}

/// `poolwright COMMAND --help` as the binary prints it, with no
/// `POOLWRIGHT_*` variable set (their values would show as defaults).
fn help(path: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolwright"));
    // A fixed width: the page is the same whatever terminal regenerates it.
    cmd.args(path)
        .arg("--help")
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("POOLWRIGHT_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{path:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// The command-line reference, generated from the argument definitions
/// (clap): every command's `--help`, so the page cannot drift from them.
#[test]
fn the_command_reference_is_generated_from_the_arguments() {
    use clap::CommandFactory;
    let mut out = String::from(
        "# Command reference\n\n\
         <!-- Generated from the command-line definitions by tests/it/docs.rs: \
         do not edit; regenerate with `POOLWRIGHT_BLESS=1 cargo test --test it docs::`. -->\n\n\
         Each command's `--help`, as `poolwright` prints it. Exit codes, flags shared \
         with Terraform and output formats are in [Commands and exit codes](commands.md).\n\n",
    );
    out += &format!("## poolwright\n\n```text\n{}```\n\n", help(&[]));
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut String) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            path.push(sub.get_name().to_string());
            let args: Vec<&str> = path.iter().map(String::as_str).collect();
            *out += &format!(
                "{} poolwright {}\n\n```text\n{}```\n\n",
                "#".repeat(path.len() + 1),
                args.join(" "),
                help(&args)
            );
            walk(sub, path, out);
            path.pop();
        }
    }
    walk(&poolwright::cli::Cli::command(), &mut Vec::new(), &mut out);
    check_generated("docs/reference/cli.md", &format!("{}\n", out.trim_end()));
}

/// The document reference, generated from the JSON Schema (itself generated
/// from the types the loader reads): every field of every kind, its type,
/// default and description.
#[test]
fn the_document_reference_is_generated_from_the_schema() {
    let schema: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("schemas/poolwright.schema.json")).unwrap(),
    )
    .unwrap();
    let defs = &schema["definitions"];
    let mut out = String::from(
        "# Field reference\n\n\
         <!-- Generated from schemas/poolwright.schema.json by tests/it/docs.rs: do not edit; \
         regenerate with `POOLWRIGHT_BLESS=1 cargo test --test it docs::`. -->\n\n\
         Every field of every document kind, from the JSON Schema \
         ([`schemas/poolwright.schema.json`](../../schemas/poolwright.schema.json)), which is \
         generated from the types poolwright reads. [Desired-state documents](documents.md) \
         explains the directory and each kind.\n",
    );
    for kind in [
        "ProviderDoc",
        "ClusterDoc",
        "NodePoolDoc",
        "DisruptionPolicyDoc",
        "FleetRolloutDoc",
        "ImageChannelDoc",
    ] {
        out += &format!("\n## {}\n\n", kind.trim_end_matches("Doc"));
        out += "| field | type | default | description |\n|---|---|---|---|\n";
        fields(defs, &defs[kind], "", &mut Vec::new(), &mut out);
    }
    check_generated("docs/reference/fields.md", &out);
}

/// The definition a `$ref` (or a single-`allOf` wrapper) names.
fn resolve<'a>(
    defs: &'a serde_json::Value,
    v: &'a serde_json::Value,
) -> (&'a serde_json::Value, Option<&'a str>) {
    if let Some(r) = v["$ref"].as_str() {
        let name = r.trim_start_matches("#/definitions/");
        return (&defs[name], Some(name));
    }
    if let Some([one]) = v["allOf"].as_array().map(Vec::as_slice) {
        return resolve(defs, one);
    }
    // `T | null` is an optional T.
    if let Some(alts) = v["anyOf"].as_array() {
        let real: Vec<_> = alts.iter().filter(|a| a["type"] != "null").collect();
        if let [one] = real.as_slice() {
            return resolve(defs, one);
        }
    }
    (v, None)
}

fn type_name(defs: &serde_json::Value, v: &serde_json::Value) -> String {
    let (d, name) = resolve(defs, v);
    if let Some(values) = d["enum"].as_array() {
        return values
            .iter()
            .map(|x| format!("`{}`", x.as_str().map_or(x.to_string(), str::to_string)))
            .collect::<Vec<_>>()
            .join(", ");
    }
    if let Some(c) = d["const"].as_str() {
        return format!("`{c}`");
    }
    // `["string", "null"]`: an optional string.
    let ty = d["type"].as_str().or_else(|| {
        d["type"]
            .as_array()
            .and_then(|ts| ts.iter().filter_map(|t| t.as_str()).find(|t| *t != "null"))
    });
    match ty {
        Some("array") => format!("list of {}", type_name(defs, &d["items"])),
        Some("object") if d["properties"].is_null() => {
            match d["additionalProperties"].as_object() {
                Some(_) => format!("map of {}", type_name(defs, &d["additionalProperties"])),
                None => "map".into(),
            }
        }
        Some("object") => "object".into(),
        Some(t) => match name {
            Some(n) if !matches!(n, "Duration" | "Percent") || t != "string" => {
                format!("{t} ({n})")
            }
            Some(n) => n.to_lowercase(),
            None => t.to_string(),
        },
        None if d["anyOf"].is_array() || d["oneOf"].is_array() => {
            let alts = d["anyOf"].as_array().or(d["oneOf"].as_array()).unwrap();
            alts.iter()
                .filter(|a| a["type"] != "null")
                .map(|a| type_name(defs, a))
                .collect::<Vec<_>>()
                .join(" or ")
        }
        None => name.unwrap_or("any").to_string(),
    }
}

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn fields(
    defs: &serde_json::Value,
    v: &serde_json::Value,
    prefix: &str,
    seen: &mut Vec<String>,
    out: &mut String,
) {
    let (d, name) = resolve(defs, v);
    if let Some(n) = name {
        if seen.iter().any(|s| s == n) {
            return;
        }
        seen.push(n.to_string());
    }
    let required: Vec<&str> = d["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    // One object of several shapes (a Provider's spec, by `type`): each
    // shape's fields, said to be that shape's.
    let variants = d["oneOf"].as_array().or(d["anyOf"].as_array());
    if let Some(variants) = variants.filter(|v| v.len() > 1) {
        for v in variants {
            let (shape, _) = resolve(defs, v);
            let which = shape["properties"]["type"]["enum"][0]
                .as_str()
                .or(shape["properties"]["type"]["const"].as_str());
            let mut rows = String::new();
            fields(defs, v, prefix, seen, &mut rows);
            match which {
                Some(t) => {
                    for row in rows.lines() {
                        // The description cell is the last: say whose field it is.
                        let (head, desc) = row.trim_end_matches(" |").rsplit_once(" | ").unwrap();
                        *out += &format!("{head} | (`type: {t}`) {desc} |\n");
                    }
                }
                None => *out += &rows,
            }
        }
    }
    if let Some(props) = d["properties"].as_object() {
        for (key, p) in props {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            let (target, _) = resolve(defs, p);
            let description = p["description"]
                .as_str()
                .or(target["description"].as_str())
                .unwrap_or_default();
            let default = match &p["default"] {
                serde_json::Value::Null if required.contains(&key.as_str()) => "required".into(),
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => format!("`{s}`"),
                other => format!("`{other}`"),
            };
            *out += &format!(
                "| `{path}` | {} | {default} | {} |\n",
                cell(&type_name(defs, p)),
                cell(description)
            );
            // Into objects, and into the items of lists of objects.
            let inner = if target["type"] == "array" {
                &target["items"]
            } else {
                p
            };
            fields(defs, inner, &path, seen, out);
        }
    }
    if name.is_some() {
        seen.pop();
    }
}
