//! Reading a desired-state directory: which files, in which order, split into
//! documents, each deserialized with positions and hard limits.
//!
//! Discovery ([`discover`]) and parsing ([`parse_file`]) are separate so the same
//! parser serves a working tree, a git tree at HEAD, and the fuzzer.

use serde::Deserialize;
use serde_saphyr::{DuplicateKeyPolicy, Error as YamlError};

use super::diag::{Diagnostic, did_you_mean, one_of};
use super::located::{At, LineOffset, Pos};
use super::types::{
    API_VERSION, ClusterDoc, DisruptionPolicyDoc, FleetRolloutDoc, ImageChannelDoc, KINDS,
    NodePoolDoc, ProviderDoc,
};

/// Name of a gitignore-style file that excludes paths from loading (for example
/// sub-directories holding examples for other providers).
pub const IGNORE_FILE: &str = ".poolwrightignore";

/// Hard limits on input, so a hostile or broken file costs little.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_file_bytes: u64,
    pub max_documents_per_file: usize,
    /// Parser events per document (bounds alias expansion: "billion laughs").
    pub max_events: usize,
    pub max_aliases: usize,
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 1024 * 1024,
            max_documents_per_file: 1000,
            max_events: 200_000,
            max_aliases: 1000,
            max_depth: 64,
        }
    }
}

/// One desired-state file as read from disk (or from a git tree).
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// How diagnostics name the file: the root as the user wrote it, joined with
    /// the path inside it.
    pub display: String,
    pub bytes: Vec<u8>,
}

/// A document of a known kind, with the file it came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Document {
    Provider(Box<ProviderDoc>),
    Cluster(ClusterDoc),
    NodePool(Box<NodePoolDoc>),
    DisruptionPolicy(DisruptionPolicyDoc),
    FleetRollout(Box<FleetRolloutDoc>),
    ImageChannel(Box<ImageChannelDoc>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sourced {
    pub file: String,
    /// Where the document starts (its first line with content).
    pub pos: Pos,
    pub doc: Document,
}

/// True for files that editors and tools leave behind while saving.
fn is_editor_leftover(name: &str) -> bool {
    name.starts_with('.')
        || name.starts_with(".#")
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name == "4913"
}

/// A file name the loader reads (`*.yaml`/`*.yml`, not an editor's leftover).
pub fn is_desired_state_file(name: &str) -> bool {
    !is_editor_leftover(name) && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// One `---`-separated document, and how many lines of the file precede it.
struct Chunk<'a> {
    first_line: u32,
    lines_before: u32,
    text: &'a str,
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// True when a line carries YAML content (not blank, a comment, a directive or a
/// bare document marker).
fn has_content(line: &str) -> bool {
    let line = if is_marker(line, "---") {
        &line[3..]
    } else {
        line
    };
    let t = line.trim();
    !(t.is_empty() || t.starts_with('#') || line.starts_with('%'))
}

/// Split a YAML stream into documents. A line starting with `---` or `...`
/// followed by a space or the end of the line is always a document marker in
/// YAML (content may not begin a line with them), so splitting on lines is exact.
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    // (line number, byte offset of the line, line)
    let mut lines = Vec::new();
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        lines.push((i as u32 + 1, offset, line.trim_end_matches(['\n', '\r'])));
        offset += line.len();
    }
    let mut chunks = Vec::new();
    let mut emit = |range: &[(u32, usize, &str)], end: usize| {
        if let Some(&(first_line, _, _)) = range.iter().find(|(_, _, l)| has_content(l)) {
            let (start_line, start, _) = range[0];
            chunks.push(Chunk {
                first_line,
                lines_before: start_line - 1,
                text: &text[start..end],
            });
        }
    };
    let mut begin = 0; // index into `lines` of the current document's first line
    for (i, &(_, at, line)) in lines.iter().enumerate() {
        let current = &lines[begin..i];
        if is_marker(line, "---") {
            if current.iter().any(|(_, _, l)| has_content(l)) {
                emit(current, at);
                begin = i;
            } else {
                // Comments and blank lines between documents belong to nobody;
                // directives belong to the document that follows them.
                begin = match current.iter().position(|(_, _, l)| l.starts_with('%')) {
                    Some(k) => begin + k,
                    None => i,
                };
            }
        } else if is_marker(line, "...") {
            emit(current, at);
            begin = i + 1;
        }
    }
    emit(&lines[begin.min(lines.len())..], text.len());
    chunks
}

/// Parse the whole stream with the YAML library, syntax only (no values are
/// built, aliases are not expanded), with the specification's indentation
/// rules; return how many documents have content, or where it is not YAML.
fn stream_documents(text: &str) -> Result<usize, (Pos, String)> {
    match count_documents(text, true) {
        Ok(n) => Ok(n),
        // Where the relaxed reading fails too, its error is the one a person
        // recognises (an unclosed bracket rather than the indentation of the
        // line after it); where only the strict one fails, indentation is it.
        Err(strict) => Err(count_documents(text, false).err().unwrap_or(strict)),
    }
}

fn count_documents(text: &str, strict: bool) -> Result<usize, (Pos, String)> {
    use serde_saphyr::granit_parser::{Event, Options, Parser, ScalarStyle};
    let mut options = Options::default();
    options.strict_indentation = strict;
    let mut parser = Parser::new_from_str_with_options(text, options);
    let mut documents = 0;
    // Whether the current document holds a node (an empty `---` has none).
    let mut has_node = false;
    while let Some(event) = parser.next_event() {
        match event {
            Ok((Event::DocumentStart(..), _)) => has_node = false,
            Ok((Event::DocumentEnd, _)) => {
                if has_node {
                    documents += 1;
                }
                has_node = false;
            }
            Ok((Event::StreamEnd, _)) => break,
            Ok((Event::Scalar(_, style, anchor, tag), span)) if !has_node => {
                // A document with nothing after `---` (or only comments) is
                // an implicit null: a plain scalar spanning no text, with no
                // anchor or tag of its own.
                has_node = style != ScalarStyle::Plain
                    || span.end.index() > span.start.index()
                    || anchor != 0
                    || tag.is_some();
            }
            Ok((Event::SequenceStart(..) | Event::MappingStart(..) | Event::Alias(..), _)) => {
                has_node = true
            }
            Ok(_) => {}
            Err(e) => {
                let mark = e.marker();
                let info = e.info();
                let message = if info.is_empty() {
                    format!("{:?}", e.kind())
                } else {
                    info
                };
                let pos = Pos::new(
                    u32::try_from(mark.line()).unwrap_or(u32::MAX).max(1),
                    u32::try_from(mark.col())
                        .unwrap_or(u32::MAX)
                        .saturating_add(1),
                );
                return Err((pos, format!("not valid YAML: {message}")));
            }
        }
    }
    Ok(documents)
}

fn yaml_options(limits: &Limits) -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // The specification's indentation rules: a wrongly indented flow
    // collection or quoted scalar is an error, not a guess.
    options.strict_indentation = true;
    // YAML 1.1 booleans (`no`, `off`, `y`) must not silently become booleans.
    options.strict_booleans = true;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::Error;
    options.reject_unsupported_tags = true;
    options.budget = serde_saphyr::budget! {
        max_events: limits.max_events,
        max_aliases: limits.max_aliases,
        max_depth: limits.max_depth,
        max_documents: 1,
    };
    options.alias_limits.max_total_replayed_events = limits.max_events;
    options
}

/// The fields every document must start with, read leniently first so that an
/// unknown kind or apiVersion is reported as such rather than as a type error.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    api_version: Option<At<String>>,
    kind: Option<At<String>>,
}

/// Turn a serde-saphyr error into our diagnostic format, adding "did you mean".
fn yaml_error(file: &str, fallback: Pos, err: &YamlError) -> Diagnostic {
    use serde_saphyr::MessageFormatter;
    let mut err = err.without_snippet();
    while let YamlError::AliasError { error, .. } = err {
        err = error.without_snippet();
    }
    let pos = err
        .location()
        .map(|l| LineOffset::apply(Pos::from(l)))
        .unwrap_or(fallback)
        .or(fallback);
    let message = match err {
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => {
            if expected.is_empty() {
                format!("unknown field {field:?}: this mapping takes no fields")
            } else {
                format!(
                    "unknown field {field:?}, expected one of {}{}",
                    one_of(expected),
                    did_you_mean(field, expected.iter().copied())
                )
            }
        }
        YamlError::SerdeUnknownVariant {
            variant, expected, ..
        } => format!(
            "unknown value {variant:?}, expected one of {}{}",
            one_of(expected),
            did_you_mean(variant, expected.iter().copied())
        ),
        YamlError::SerdeMissingField { field, .. } => {
            format!("missing required field {field:?}")
        }
        // Every scalar target (numbers, booleans, strings) reports this one.
        YamlError::Unexpected {
            expected: "string scalar",
            ..
        } => {
            "expected a single value here (a number, string or boolean), found a list or a mapping"
                .to_string()
        }
        YamlError::DuplicateMappingKey { key, .. } => match key {
            Some(k) => format!("duplicate key {k:?}: a key may appear only once in a mapping"),
            None => "duplicate key: a key may appear only once in a mapping".to_string(),
        },
        YamlError::Budget { breach, .. } => format!(
            "document exceeds the parser's safety limits ({breach:?}); \
             aliases expanding into huge documents (an alias bomb) are refused"
        ),
        other => serde_saphyr::UserMessageFormatter
            .format_message(other)
            .into_owned(),
    };
    Diagnostic::error(file, pos, message)
}

/// Parse one file into documents. Problems become diagnostics; a document with
/// a problem yields no `Sourced` (so nothing can act on it).
pub fn parse_file(file: &SourceFile, limits: &Limits) -> (Vec<Sourced>, Vec<Diagnostic>) {
    let name = file.display.as_str();
    let mut docs = Vec::new();
    let mut diags = Vec::new();
    let text = match std::str::from_utf8(&file.bytes) {
        Ok(t) => t.strip_prefix('\u{feff}').unwrap_or(t),
        Err(e) => {
            let before = &file.bytes[..e.valid_up_to()];
            let line = before.iter().filter(|b| **b == b'\n').count() as u32 + 1;
            let col = before.iter().rev().take_while(|b| **b != b'\n').count() as u32 + 1;
            diags.push(Diagnostic::error(
                name,
                Pos::new(line, col),
                "file is not valid UTF-8",
            ));
            return (docs, diags);
        }
    };
    // The YAML library reads the whole stream first: a syntax error anywhere
    // (text after a `...`, a wrongly indented flow or quoted scalar, a tab
    // where indentation is meant) refuses the file, and its document count
    // must agree with the line splitter's, so no document is lost or merged.
    let documents = match stream_documents(text) {
        Ok(n) => n,
        Err((pos, message)) => {
            diags.push(Diagnostic::error(name, pos, message));
            return (docs, diags);
        }
    };
    let chunks = split_documents(text);
    if chunks.len() != documents {
        diags.push(Diagnostic::error(
            name,
            Pos::START,
            format!(
                "cannot separate the documents of this file: the YAML parser sees {documents}, \
                 the `---` lines say {}; put each document after a `---` line of its own",
                chunks.len()
            ),
        ));
        return (docs, diags);
    }
    if chunks.is_empty() {
        diags.push(Diagnostic::error(
            name,
            Pos::START,
            "file contains no documents; an empty file is refused (add a document or delete the file)",
        ));
        return (docs, diags);
    }
    if chunks.len() > limits.max_documents_per_file {
        diags.push(Diagnostic::error(
            name,
            Pos::new(chunks[limits.max_documents_per_file].first_line, 1),
            format!(
                "more than {} documents in one file; split it",
                limits.max_documents_per_file
            ),
        ));
        return (docs, diags);
    }
    let options = yaml_options(limits);
    for chunk in &chunks {
        let start = Pos::new(chunk.first_line, 1);
        let _offset = LineOffset::set(chunk.lines_before);
        match parse_document(name, start, chunk.text, chunk.lines_before, &options) {
            Ok(doc) => docs.push(Sourced {
                file: name.to_string(),
                pos: start,
                doc,
            }),
            Err(mut d) => diags.append(&mut d),
        }
    }
    (docs, diags)
}

/// Read `apiVersion` and `kind` first, so that a wrong one is reported as such
/// rather than as a type error deep inside the document.
fn document_kind(
    file: &str,
    start: Pos,
    text: &str,
    options: &serde_saphyr::Options,
) -> Result<At<String>, Diagnostic> {
    let header: Header =
        serde_saphyr::from_str_with_options(text, options.clone()).map_err(|e| {
            match e.without_snippet() {
                YamlError::SerdeInvalidType { .. } | YamlError::Unexpected { .. } => {
                    Diagnostic::error(
                        file,
                        start,
                        "expected a document (a mapping with apiVersion, kind, metadata and spec)",
                    )
                }
                _ => yaml_error(file, start, &e),
            }
        })?;
    let api_version = header
        .api_version
        .ok_or_else(|| Diagnostic::error(file, start, "missing required field \"apiVersion\""))?;
    if api_version.value != API_VERSION {
        return Err(Diagnostic::error(
            file,
            api_version.pos.or(start),
            format!(
                "unsupported apiVersion {:?}, expected {API_VERSION:?}",
                api_version.value
            ),
        ));
    }
    let kind = header
        .kind
        .ok_or_else(|| Diagnostic::error(file, start, "missing required field \"kind\""))?;
    Ok(kind)
}

fn parse_document(
    file: &str,
    start: Pos,
    text: &str,
    lines_before: u32,
    options: &serde_saphyr::Options,
) -> Result<Document, Vec<Diagnostic>> {
    let kind = document_kind(file, start, text, options).map_err(|d| vec![d])?;
    let typed = |text: &str| -> Result<Document, YamlError> {
        let opts = options.clone();
        Ok(match kind.value.as_str() {
            "Provider" => {
                Document::Provider(Box::new(serde_saphyr::from_str_with_options(text, opts)?))
            }
            "Cluster" => Document::Cluster(serde_saphyr::from_str_with_options(text, opts)?),
            "DisruptionPolicy" => {
                Document::DisruptionPolicy(serde_saphyr::from_str_with_options(text, opts)?)
            }
            "FleetRollout" => {
                Document::FleetRollout(Box::new(serde_saphyr::from_str_with_options(text, opts)?))
            }
            "ImageChannel" => {
                Document::ImageChannel(Box::new(serde_saphyr::from_str_with_options(text, opts)?))
            }
            _ => Document::NodePool(Box::new(serde_saphyr::from_str_with_options(text, opts)?)),
        })
    };
    if !KINDS.contains(&kind.value.as_str()) {
        return Err(vec![Diagnostic::error(
            file,
            kind.pos.or(start),
            format!(
                "unknown kind {:?}, expected one of {}{}",
                kind.value,
                one_of(KINDS),
                did_you_mean(&kind.value, KINDS.iter().copied())
            ),
        )]);
    }
    typed(text).map_err(|e| {
        let first = yaml_error(file, start, &e);
        let mut all = vec![first.clone()];
        all.extend(later_errors(text, lines_before, &first, |t| {
            typed(t).err().map(|e| yaml_error(file, start, &e))
        }));
        all
    })
}

/// Blank line `at` and the lines nested under it; then, while that leaves a
/// parent key (`key:` on a line of its own) with nothing under it, blank the
/// parent too, so it falls back to its default instead of becoming null.
fn blank_subtree(lines: &mut [&str], at: usize) {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut at = at;
    loop {
        let depth = indent(lines[at]);
        lines[at] = "";
        for line in lines.iter_mut().skip(at + 1) {
            if !line.trim().is_empty() && indent(line) <= depth {
                break;
            }
            *line = "";
        }
        let Some(parent) = (0..at).rev().find(|&k| !lines[k].trim().is_empty()) else {
            return;
        };
        let p = lines[parent];
        let has_children = lines[parent + 1..]
            .iter()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| indent(l) > indent(p));
        if indent(p) >= depth || has_children || !p.trim_end().ends_with(':') {
            return;
        }
        at = parent;
    }
}

/// The errors after the first one in the same document. serde stops at the
/// first; to report them all at once, blank the offending line (and the lines
/// nested under it, keeping line numbers), parse again, and repeat. A later
/// error is kept only if it comes after the previous one and is not a missing
/// field or a syntax error, which blanking itself could have caused.
fn later_errors(
    text: &str,
    lines_before: u32,
    first: &Diagnostic,
    parse: impl Fn(&str) -> Option<Diagnostic>,
) -> Vec<Diagnostic> {
    const MAX_ROUNDS: usize = 20;
    let mut lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut last = first.clone();
    for _ in 0..MAX_ROUNDS {
        let Some(rel) = (last.line as usize).checked_sub(lines_before as usize + 1) else {
            break;
        };
        if rel >= lines.len() || lines[rel].trim().is_empty() {
            break;
        }
        blank_subtree(&mut lines, rel);
        let mut retry = lines.join("\n");
        retry.push('\n');
        let Some(next) = parse(&retry) else {
            break;
        };
        let induced = next.message.starts_with("missing required field")
            || next.message.starts_with("while ")
            || (next.line, next.column) <= (last.line, last.column);
        if induced {
            break;
        }
        found.push(next.clone());
        last = next;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_keeps_file_line_numbers() {
        let text =
            "# leading comment\na: 1\n---\nb: 2\n--- # c\n\n---\n%YAML 1.2\n---\nc: 3\n...\n";
        let chunks = split_documents(text);
        let firsts: Vec<u32> = chunks.iter().map(|c| c.first_line).collect();
        assert_eq!(firsts, vec![2, 4, 10]);
        let befores: Vec<u32> = chunks.iter().map(|c| c.lines_before).collect();
        assert_eq!(befores, vec![0, 2, 7]);
        assert_eq!(chunks[1].text, "---\nb: 2\n");
        assert_eq!(chunks[2].text, "%YAML 1.2\n---\nc: 3\n");
    }

    #[test]
    fn the_parser_counts_documents_with_content() {
        let text = "# header\n\n---\na: 1\n---\n# comment only\n---\nb: 2\n...\n---\nc: 3\n";
        assert_eq!(stream_documents(text), Ok(3));
        assert_eq!(stream_documents("---\n\"\"\n"), Ok(1));
        assert_eq!(stream_documents("--- ~\n---\n"), Ok(1));
        assert_eq!(stream_documents("# nothing\n"), Ok(0));
    }

    #[test]
    fn editor_leftovers_are_not_yaml() {
        for name in [
            ".pool.yaml.swp",
            "pool.yaml~",
            ".#pool.yaml",
            "4913",
            ".hidden.yaml",
            "x.json",
        ] {
            assert!(!is_desired_state_file(name), "{name}");
        }
        assert!(is_desired_state_file("pool.yaml") && is_desired_state_file("pool.yml"));
    }
}
