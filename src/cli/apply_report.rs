//! What `apply` writes on standard output: the plan and its outcome for a
//! person, or with `-o json` one JSON object per line for a program (the
//! plan, every event as it happens, the outcome last), as Terraform's
//! `apply -json` streams its messages. Progress for a person (bars, log
//! lines) and errors stay on standard error either way.

use serde_json::{Value, json};

use crate::model::Event;
use crate::plan::Plan;
use crate::plan::render::{Source, Style, render_json, render_text};

/// How an apply ended, as the outcome line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step ran.
    Complete,
    /// Nothing to do.
    NoChanges,
    /// The operator said no.
    Cancelled,
    /// Ctrl-C or SIGTERM: stopped at a safe point; the next apply resumes.
    Interrupted,
    /// A step failed, a pool waits for a human, or a change halted.
    Stopped,
    /// Nothing was changed: the desired state, a cluster or the plan was
    /// refused before the first step.
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::NoChanges => "no-changes",
            Outcome::Cancelled => "cancelled",
            Outcome::Interrupted => "interrupted",
            Outcome::Stopped => "stopped",
            Outcome::Error => "error",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Report {
    json: bool,
}

impl Report {
    pub fn new(json: bool) -> Report {
        Report { json }
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    /// A line for a person (a change's decision, what it waits for): on
    /// standard output as text, on standard error beside the JSON.
    pub fn line(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    pub fn plan(&self, plan: &Plan, source: &Source, style: Style) {
        if self.json {
            emit(json!({ "type": "plan", "plan": render_json(plan, source) }));
        } else {
            print!("{}", render_text(plan, source, style));
        }
    }

    /// With `-o json`, what prints every event as a line of its own.
    pub fn event_observer(&self) -> Option<impl Fn(&Event) + Send + Sync + 'static> {
        self.json.then_some(|e: &Event| {
            let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("type".into(), "event".into());
            }
            emit(v);
        })
    }

    /// The last line: how it ended, the steps done, the errors; `text` is
    /// the sentence a person reads (on standard error beside the JSON).
    pub fn outcome(&self, outcome: Outcome, steps_done: usize, errors: &[String], text: &str) {
        if self.json {
            if !text.is_empty() {
                eprintln!("{text}");
            }
            emit(json!({
                "type": "outcome",
                "outcome": outcome.as_str(),
                "stepsDone": steps_done,
                "errors": errors,
            }));
        } else if !text.is_empty() {
            println!("{text}");
        }
    }
}

/// One object, one line, written whole (stdout's lock is held per line).
fn emit(v: Value) {
    println!("{v}");
}
