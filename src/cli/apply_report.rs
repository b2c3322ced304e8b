//! What `apply` writes on standard output: the plan and its outcome for a
//! person, or with `-o json` one JSON object per line for a program (the
//! plan, every event as it happens, the outcome last), as Terraform's
//! `apply -json` streams its messages. Progress for a person (bars, log
//! lines) and errors stay on standard error either way.

use std::io::Write;

use serde::Serialize;

use super::progress_log::Bars;

use crate::model::Event;
use crate::plan::Plan;
use crate::plan::render::{Source, Style, render_json, render_text};

/// How an apply ended, as the outcome line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Every step ran.
    Complete,
    /// Nothing to do.
    NoChanges,
    /// The operator said no.
    Cancelled,
    /// Ctrl-C or SIGTERM: stopped at a safe point (or, on a second signal,
    /// at once); the next apply resumes.
    Interrupted,
    /// A step failed, a pool waits for a human, a change halted, or an
    /// error came between steps.
    Stopped,
    /// Refused before the first step: nothing was changed.
    Error,
}

/// A line of `-o json`: its type first, then what it carries.
#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutcomeBody<'a> {
    outcome: Outcome,
    /// None when it is not known (a second signal exits at once).
    steps_done: Option<usize>,
    errors: &'a [String],
}

#[derive(Serialize)]
struct PlanBody {
    plan: serde_json::Value,
}

/// Where apply's output goes. Lines for a person are printed above the
/// progress bars when there are any (`over`), so a redraw never eats them.
#[derive(Clone)]
pub struct Report {
    json: bool,
    bars: Option<Bars>,
}

impl Report {
    pub fn new(json: bool) -> Report {
        Report { json, bars: None }
    }

    /// The same report, printing above these bars while they are drawn.
    pub fn over(&self, bars: Option<Bars>) -> Report {
        Report {
            json: self.json,
            bars,
        }
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    /// Run `print` with the bars (if any) out of the way.
    fn shown(&self, print: impl FnOnce()) {
        match &self.bars {
            Some(bars) => bars.suspend(print),
            None => print(),
        }
    }

    /// A line for a person (a change's decision, what it waits for): on
    /// standard output as text, on standard error beside the JSON.
    pub fn line(&self, text: &str) {
        self.shown(|| {
            if self.json {
                eprintln!("{text}");
            } else {
                out(text);
            }
        });
    }

    /// A notice on standard error (a signal's effect).
    pub fn note(&self, text: &str) {
        self.shown(|| eprintln!("{text}"));
    }

    /// An error line, on standard error.
    pub fn error(&self, text: &str) {
        self.shown(|| eprintln!("error: {text}"));
    }

    pub fn plan(&self, plan: &Plan, source: &Source, style: Style) {
        if self.json {
            emit(
                "plan",
                &PlanBody {
                    plan: render_json(plan, source),
                },
            );
        } else {
            let text = render_text(plan, source, style);
            out(text.strip_suffix('\n').unwrap_or(&text));
        }
    }

    /// With `-o json`, what prints every event as a line of its own.
    pub fn event_observer(&self) -> Option<impl Fn(&Event) + Send + Sync + 'static> {
        self.json.then_some(|e: &Event| emit("event", e))
    }

    /// The last line: how it ended, the steps done, the errors; `text` is
    /// the sentence a person reads (on standard error beside the JSON).
    pub fn outcome(&self, outcome: Outcome, steps_done: usize, errors: &[String], text: &str) {
        self.end(outcome, Some(steps_done), errors, text);
    }

    /// The outcome of a second signal, which exits at once: the steps done
    /// are not counted.
    pub fn abandoned(&self, text: &str) {
        self.end(Outcome::Interrupted, None, &[], text);
    }

    fn end(&self, outcome: Outcome, steps_done: Option<usize>, errors: &[String], text: &str) {
        // The end: the bars stop as they stand, and the outcome is the last
        // thing on the screen, under them.
        if let Some(bars) = &self.bars {
            bars.stop();
        }
        if self.json {
            if !text.is_empty() {
                eprintln!("{text}");
            }
            emit(
                "outcome",
                &OutcomeBody {
                    outcome,
                    steps_done,
                    errors,
                },
            );
        } else if !text.is_empty() {
            out(text);
        }
    }
}

/// A line on standard output. A reader that went away (`| head`) is no
/// reason for an apply to die between two steps: the line is dropped.
fn out(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// One object, one line, written whole (stdout's lock is held per line).
fn emit<T: Serialize>(kind: &'static str, body: &T) {
    match serde_json::to_string(&Line { kind, body }) {
        Ok(line) => out(&line),
        Err(e) => eprintln!("error: cannot write a {kind} line as JSON: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_its_type_first() {
        let body = OutcomeBody {
            outcome: Outcome::NoChanges,
            steps_done: Some(0),
            errors: &[],
        };
        assert_eq!(
            serde_json::to_string(&Line {
                kind: "outcome",
                body: &body
            })
            .unwrap(),
            r#"{"type":"outcome","outcome":"no-changes","stepsDone":0,"errors":[]}"#
        );
    }
}
