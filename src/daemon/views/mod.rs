//! What the loop publishes and the HTTP surface serves: the status board,
//! the event feed (each pool's recent events and nodes), and the metrics.

pub mod board;
pub mod feed;
pub mod metrics;
