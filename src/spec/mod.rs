//! Desired state: the document types, loading a directory with positions, and
//! validation. Nothing here acts on anything.

pub mod diag;
pub mod load;
pub mod located;
pub mod schema;
pub mod staging;
pub mod types;
pub mod validate;
pub mod values;

pub use diag::{Diagnostic, Severity};
pub use load::{Document, Limits, Sourced};
pub use located::{At, Pos};
pub use validate::{Config, LoadReport};
