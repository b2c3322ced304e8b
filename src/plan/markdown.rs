//! A plan as Markdown, for a pull-request comment (`plan -o markdown`): what
//! was planned against what, a summary table, the pools a reviewer must look
//! at (blocked, held, waiting for a human, in error) called out, and the
//! Terraform-style text in a fenced block.

use std::fmt::Write;

use super::render::{Source, Style, footer, render_text};
use super::{Headline, Plan};

/// Markdown of `plan`, made from `source`; `against` names what it was
/// compared with (the live pools, or the commit in force).
pub fn render_markdown(plan: &Plan, source: &Source, against: &str) -> String {
    let mut out = String::new();
    let what = match &source.revision {
        Some(r) => format!("{} {}", inline(&r.short()), inline(&r.subject_line())),
        None => inline(&source.dir),
    };
    let _ = writeln!(out, "#### poolwright plan: {what}\n");
    let _ = writeln!(out, "Planned against {}.\n", inline(against));
    let s = plan.summary();
    if !plan.differs() && s.errors == 0 {
        let _ = writeln!(out, "**No changes.** The pools match the desired state.");
        return out;
    }
    let _ = writeln!(out, "| pools | |\n|---|---:|");
    let rows = [
        ("to add", s.add.to_string()),
        ("to change in place", s.change.to_string()),
        ("to roll", format!("{} ({} nodes)", s.roll, s.roll_nodes)),
        ("to destroy", s.destroy.to_string()),
        ("blocked by a disruption policy", s.blocked.to_string()),
        ("held by a FleetRollout", s.held.to_string()),
        ("waiting for a human", s.waiting.to_string()),
        ("in error", s.errors.to_string()),
    ];
    for (label, n) in rows {
        if n != "0" && n != "0 (0 nodes)" {
            let _ = writeln!(out, "| {label} | {n} |");
        }
    }
    let _ = writeln!(out, "\n{}\n", footer(&s));

    let mut attention = Vec::new();
    for p in &plan.pools {
        let who = format!("`nodepool.{}`", p.pool);
        if p.headline == Headline::Error {
            attention.push(format!("- :x: {who}: {}", inline(&p.reason)));
        }
        if p.headline == Headline::Delete {
            attention.push(format!(
                "- :warning: {who} will be **destroyed**: {}",
                inline(&p.reason)
            ));
        }
        if let Some(b) = p.blocked() {
            let until = b.until().map(|t| format!(" until {t}")).unwrap_or_default();
            attention.push(format!(
                "- :no_entry: {who} is blocked{until}: {}",
                inline(&b.to_string())
            ));
        }
        if let Some(held) = p.fleet.as_ref().and_then(|f| f.held.as_ref()) {
            attention.push(format!(
                "- :pause_button: {who} is held: {}",
                inline(&held.message)
            ));
        }
        if let Some(w) = p.waiting() {
            attention.push(format!(
                "- :hand: {who} waits for a human: {}",
                inline(&w.to_string())
            ));
        }
    }
    for n in &plan.images {
        attention.push(format!("- :hourglass: {}", inline(n)));
    }
    if !attention.is_empty() {
        let _ = writeln!(out, "**Look at these:**\n");
        for line in attention {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out);
    }
    let text = render_text(plan, source, Style { color: false });
    let _ = writeln!(
        out,
        "<details><summary>The plan</summary>\n\n```diff\n{}```\n\n</details>",
        // A fence inside the text would end the block early.
        text.replace("```", "'''")
    );
    out
}

/// Text from a commit or a branch for one line of Markdown: no line
/// breaks, and every character that could start markup (a table cell, code,
/// HTML, a link or an image, emphasis, a mention) escaped.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '|' | '`' | '[' | ']' | '(' | ')' | '!' | '*' | '_' | '~' | '#' | '@' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_a_commit_cannot_break_the_comment() {
        assert_eq!(
            inline("roll | `web` <script>\nnext ![x](http://e) @team"),
            "roll \\| \\`web\\` &lt;script&gt; next \\!\\[x\\]\\(http://e\\) \\@team"
        );
    }
}
