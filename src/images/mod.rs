//! Node images that follow a channel. Pure, like `fleet`: no network, no
//! disk, no clock.
//!
//! - [`pick`]: which of a source's images is eligible (the newest not
//!   denied, not recalled, and old enough), and when the newest becomes so.
//! - [`record`]: what each channel remembers across polls, restarts and
//!   daemons (`images.json`): the image in force, the one before it, the
//!   queued one, what the source last said; and the recalls. Each poll,
//!   settle and recall is a transition of it.
//! - [`resolve`]: a loaded desired state with every `{channel: NAME}`
//!   image replaced by its channel's image in force, so that the planner,
//!   the fleet and the executor see an image like any other.
//!
//! The shells (`cli` for `plan` and `apply`, `daemon` for polling) ask the
//! sources (`provider::Provider::channel_images`) and keep the record
//! (`store::images`).

pub mod pick;
pub mod record;
pub mod resolve;

pub use pick::{Eligibility, Pick, pick};
pub use record::{ChannelRecord, Images, Note, Recall};
