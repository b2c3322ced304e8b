//! An image as a vendor publishes it: what a channel's source answers.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// One published image and when it was released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub image: String,
    pub released: Timestamp,
}

/// Most images one answer of a source may hold: a catalogue is a few
/// hundred; more is a source gone wrong, refused rather than kept.
pub const MAX_RELEASES: usize = 10_000;
