//! Asking image channels' sources, once per channel, and what an answer
//! does to the channel's record. The CLI asks at each `plan` and `apply`;
//! the daemon asks every `interval` (`daemon::reconciler::images`).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::images::{Eligibility, Images, Note, pick};
use crate::model::image::{MAX_RELEASES, Release};
use crate::provider::Providers;
use crate::spec::Config;
use crate::spec::types::ImageChannelDoc;

/// How long one ask of a source may take.
const ASK_DEADLINE: Duration = Duration::from_secs(30);
/// How often a channel's source is asked when its document does not say.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
/// The longest image id an answer may carry.
const MAX_IMAGE_ID: usize = 1024;

pub fn interval(doc: &ImageChannelDoc) -> Duration {
    doc.spec
        .interval
        .as_ref()
        .map_or(DEFAULT_INTERVAL, |i| i.value.as_std())
}

/// Ask `channel`'s source for its images: the answer, checked, or why not.
pub async fn ask(
    providers: &Providers,
    channel: &str,
    doc: &ImageChannelDoc,
) -> Result<Vec<Release>, String> {
    let source = &doc.spec.source.value;
    let (provider, _) = source.provider();
    let Some(p) = providers.get(provider.as_str()) else {
        return Err(match providers.failed.get(provider.as_str()) {
            Some(e) => format!("provider {} is unavailable: {e}", provider.value),
            None => format!("provider {} is not loaded", provider.value),
        });
    };
    let answer = tokio::time::timeout(ASK_DEADLINE, p.channel_images(channel, source))
        .await
        .map_err(|_| {
            format!(
                "provider {} did not answer within {}s",
                provider.value,
                ASK_DEADLINE.as_secs()
            )
        })?
        .map_err(|e| e.to_string())?;
    check(answer)
}

/// An answer is untrusted: bounded in size, every id a plausible one.
fn check(answer: Vec<Release>) -> Result<Vec<Release>, String> {
    if answer.len() > MAX_RELEASES {
        return Err(format!(
            "the source offered {} images: at most {MAX_RELEASES} are read",
            answer.len()
        ));
    }
    if let Some(bad) = answer.iter().find(|r| {
        r.image.is_empty()
            || r.image.len() > MAX_IMAGE_ID
            || r.image.chars().any(|c| c.is_control() || c.is_whitespace())
    }) {
        let shown: String = bad.image.chars().take(60).collect();
        return Err(format!(
            "the source offered {shown:?}, which is not an image id"
        ));
    }
    Ok(answer)
}

/// What an answer (or a failure) of `channel`'s source does to its record.
pub fn answered(
    images: &mut Images,
    channel: &str,
    doc: &ImageChannelDoc,
    answer: Result<Vec<Release>, String>,
    in_flight: bool,
    now: Timestamp,
) -> Vec<Note> {
    let recalled = images.recalled.clone();
    let rec = images.channels.entry(channel.to_string()).or_default();
    match answer {
        Ok(releases) => {
            let rules = Eligibility::of(&doc.spec, &recalled);
            rec.observed(channel, pick(&releases, &rules, now), in_flight, now)
        }
        Err(message) => rec.failed(channel, message, now),
    }
}

/// `plan` and `apply`: ask every channel the pools follow, once each, and
/// return the record as it would be. A newer image of a channel whose
/// change is in flight (`in_flight`, by channel) is queued, as the daemon
/// queues it.
pub async fn ask_all(
    config: &Config,
    providers: &Providers,
    mut images: Images,
    in_flight: &(dyn Fn(&str) -> bool + Sync),
    now: Timestamp,
) -> (Images, Vec<Note>) {
    let mut notes = Vec::new();
    let followed = crate::images::resolve::followed(config);
    let asks = followed.iter().filter_map(|name| {
        let doc = &config.channels.get(name)?.doc;
        Some(async move { (name, doc, ask(providers, name, doc).await) })
    });
    let answers: Vec<_> = futures_util::future::join_all(asks).await;
    for (name, doc, answer) in answers {
        notes.extend(answered(
            &mut images,
            name,
            doc,
            answer,
            in_flight(name),
            now,
        ));
    }
    (images, notes)
}

/// Each channel's eligibility rules' deny list, for a recall's choice of
/// the image to go back to.
pub fn deny_lists(config: &Config) -> BTreeMap<String, std::collections::HashSet<String>> {
    config
        .channels
        .iter()
        .map(|(n, e)| (n.clone(), e.doc.spec.deny.iter().cloned().collect()))
        .collect()
}
