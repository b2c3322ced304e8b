//! Diagnostics: `FILE:LINE:COL: error: MESSAGE`, the one format every config
//! problem is reported in (terminal, JSON, daemon status and logs alike).

use std::fmt;

use serde::Serialize;

use super::located::Pos;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Diagnostic {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub severity: Severity,
    pub message: String,
}

impl Diagnostic {
    pub fn error(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: pos.line.max(1),
            column: pos.col.max(1),
            severity: Severity::Error,
            message: message.into(),
        }
    }

    pub fn warning(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message)
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            Printable(&self.file),
            self.line,
            self.column,
            self.severity,
            Printable(&self.message)
        )
    }
}

/// Text from outside (a file name, a quoted value) shown on a terminal:
/// control characters are escaped, so a file named with ANSI sequences
/// cannot rewrite what the reader sees.
struct Printable<'a>(&'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// " (did you mean \"x\"?)" when one candidate is close to what was written.
pub fn did_you_mean<'a>(written: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let best = candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(written, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, c)) => format!(" (did you mean {c:?}?)"),
        None => String::new(),
    }
}

/// "a, b or c"
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => format!("{one:?}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|n| format!("{n:?}")).collect();
            format!("{} or {last:?}", init.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_outside_are_escaped() {
        let d = Diagnostic::error("evil\u{1b}[2J.yaml", Pos::START, "bad \u{7}value");
        assert_eq!(
            d.to_string(),
            "evil\\u{1b}[2J.yaml:1:1: error: bad \\u{7}value"
        );
    }

    #[test]
    fn suggestions_only_when_close() {
        assert_eq!(
            did_you_mean("maxSurg", ["maxSurge", "maxUnavailable"]),
            " (did you mean \"maxSurge\"?)"
        );
        assert_eq!(did_you_mean("zzz", ["maxSurge", "maxUnavailable"]), "");
        assert_eq!(one_of(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
