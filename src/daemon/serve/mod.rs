//! The HTTP surface: the routes, who may call them (access, peer identity,
//! strikes, write deadlines), the listeners, the git webhooks, the status
//! page, and what every handler shares.

pub mod access;
pub mod hooks;
pub mod http;
pub mod listen;
pub mod peer_id;
pub mod shared;
pub mod strikes;
pub mod web;
pub mod write_deadline;
