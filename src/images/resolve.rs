//! A loaded desired state with each channel's image in force written into
//! the pools that follow it.

use crate::spec::Config;
use crate::spec::types::{ImageRef, ResolvedImage};

use super::record::Images;

/// Fill in every `{channel: NAME}` image of `config` from `images`: the
/// channel's image in force, or why it has none (its pools are then not
/// planned: nothing is guessed).
pub fn resolve(config: &mut Config, images: &Images) {
    for entry in config.pools.values_mut() {
        let Some(ImageRef::Channel { channel, resolved }) =
            &mut entry.doc.spec.value.template.image
        else {
            continue;
        };
        let rec = images.channels.get(channel.as_str());
        *resolved = Some(
            match rec.and_then(|r| r.in_force.as_ref().map(|f| (r, f))) {
                Some((rec, f)) => Ok(ResolvedImage {
                    image: f.image.clone(),
                    released: f.released,
                    next: rec
                        .eligible_at
                        .and(rec.newest.as_ref())
                        .map(|n| n.image.clone()),
                    next_eligible_at: rec.eligible_at,
                    queued: rec.queued.as_ref().map(|q| q.image.clone()),
                    recall_of: rec.recall_of.clone(),
                    source_error: rec.error.clone(),
                }),
                None => Err(match rec {
                    Some(r) => match (&r.error, &r.newest, r.eligible_at) {
                        (Some(e), _, _) => format!("its source failed: {e}"),
                        (None, Some(n), Some(at)) => format!(
                            "its newest image {} is not eligible until {} (minReleaseAge)",
                            n.image,
                            at.strftime("%Y-%m-%d %H:%M UTC")
                        ),
                        _ => "its source offers no eligible image".to_string(),
                    },
                    None => "its source has not been asked yet".to_string(),
                }),
            },
        );
    }
}

/// The channels the pools of `config` follow.
pub fn followed(config: &Config) -> std::collections::BTreeSet<String> {
    followers(config).into_keys().collect()
}

/// The pools following each channel.
pub fn followers(config: &Config) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (pool, e) in &config.pools {
        if let Some(c) = e.doc.spec.template.image.as_ref().and_then(|i| i.channel()) {
            out.entry(c.value.clone()).or_default().push(pool.clone());
        }
    }
    out
}
