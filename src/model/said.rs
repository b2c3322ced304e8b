//! A typed reason and the sentence people read, served together (as a
//! Kubernetes condition carries its `reason` and `message`): programs match
//! on the kind, people read the message, and the message is made in one
//! place, the reason's `Display`.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Said<T> {
    #[serde(flatten)]
    pub what: T,
    pub message: String,
}

impl<T: std::fmt::Display> Said<T> {
    pub fn new(what: T) -> Said<T> {
        Said {
            message: what.to_string(),
            what,
        }
    }
}

impl<T> std::fmt::Display for Said<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
