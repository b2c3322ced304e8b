//! JSON lines: a file another process is still appending to, or the whole
//! output of a process that ended.

use std::path::Path;

use serde_json::Value;

/// Every complete line of `path` (none if it does not exist yet). The
/// writer appends each record with one write, but a reader can still see
/// the first half of it: a last line without its newline is still being
/// written and is left for the next read, while a broken complete line is
/// a real defect and panics with the line.
pub fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: a line is not JSON ({e}): {l}", path.display()))
        })
        .collect()
}

/// Every line of `text`, the output of a process that has ended: each must
/// be JSON (a program reading it would fail on any other line).
pub fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}
