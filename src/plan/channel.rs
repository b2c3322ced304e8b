//! What a plan says of an image that follows a channel: where it came from
//! and how old it is, and what the channel holds back (a newer image not
//! eligible yet, one queued behind the change in flight, a failing source).

use jiff::Timestamp;

use super::PoolPlan;
use crate::spec::types::{ImageRef, NodePoolDoc};

fn when(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

/// "6d old", "5h old", "12m old".
pub fn age(released: Timestamp, now: Timestamp) -> String {
    format!("{} old", age_span(now.duration_since(released).as_secs()))
}

/// "6d", "5h", "12m".
pub fn age_span(secs: i64) -> String {
    match secs.max(0) {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s => format!("{}m", s / 60),
    }
}

pub(super) fn annotate(p: &mut PoolPlan, doc: &NodePoolDoc, now: Timestamp) {
    let Some(ImageRef::Channel {
        channel,
        resolved: Some(Ok(r)),
    }) = &doc.spec.template.image
    else {
        return;
    };
    let channel = channel.as_str();
    let mut source = format!(
        "channel {channel}, released {}, {}",
        when(r.released),
        age(r.released, now)
    );
    if let Some(bad) = &r.recall_of {
        source.push_str(&format!("; {bad} recalled"));
    }
    if let Some(a) = p.attributes.iter_mut().find(|a| a.name == "image") {
        a.source = Some(source);
    }
}

/// What each channel the pools follow holds back, said once per channel
/// (not per pool): a newer image not eligible yet and until when, one
/// queued behind the change in flight, a source failing.
pub fn notes(config: &crate::spec::Config) -> Vec<String> {
    let mut seen = std::collections::BTreeMap::new();
    for e in config.pools.values() {
        if let Some(ImageRef::Channel {
            channel,
            resolved: Some(Ok(r)),
        }) = &e.doc.spec.template.image
        {
            seen.entry(channel.value.clone()).or_insert(r);
        }
    }
    let mut out = Vec::new();
    for (channel, r) in seen {
        if let (Some(next), Some(at)) = (&r.next, r.next_eligible_at) {
            out.push(format!(
                "channel {channel}: {next} is not eligible until {} (minReleaseAge); its pools stay on {} until then",
                when(at),
                r.image
            ));
        }
        if let Some(q) = &r.queued {
            out.push(format!(
                "channel {channel}: {q} is eligible and waits for the change in flight (to {}) to end",
                r.image
            ));
        }
        if let Some(e) = &r.source_error {
            out.push(format!(
                "channel {channel}: its source failed ({e}); {} stays in force",
                r.image
            ));
        }
    }
    out
}
