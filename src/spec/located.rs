//! Values that remember where in a file they were written.
//!
//! Validation happens after deserialization, so every value a semantic check may
//! complain about is wrapped in [`At`]: the check can then point at `FILE:LINE:COL`.

use std::fmt;
use std::ops::Deref;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 1-based line and column in a desired-state file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    pub const START: Pos = Pos { line: 1, col: 1 };

    pub fn new(line: u32, col: u32) -> Self {
        Pos { line, col }
    }

    /// serde-saphyr reports line 0 when it could not track a position (values
    /// buffered by serde); the caller then falls back to an enclosing position.
    pub fn is_known(self) -> bool {
        self.line > 0
    }

    pub fn or(self, fallback: Pos) -> Pos {
        if self.is_known() { self } else { fallback }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

impl From<serde_saphyr::Location> for Pos {
    fn from(l: serde_saphyr::Location) -> Self {
        Pos {
            line: l.line() as u32,
            col: l.column() as u32,
        }
    }
}

/// A value together with the position it was read from.
///
/// Equality, ordering and hashing look at the value only: two documents that say
/// the same thing on different lines are the same desired state.
#[derive(Clone, Debug, Default)]
pub struct At<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> At<T> {
    pub fn new(value: T, pos: Pos) -> Self {
        At { value, pos }
    }

    /// A value that was not written in any file (defaults, tests).
    pub fn bare(value: T) -> Self {
        At {
            value,
            pos: Pos::default(),
        }
    }
}

impl<T> Deref for At<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: PartialEq> PartialEq for At<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}
impl<T: Eq> Eq for At<T> {}

impl<T: std::hash::Hash> std::hash::Hash for At<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.value.hash(state)
    }
}

impl<T: fmt::Display> fmt::Display for At<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

thread_local! {
    /// Lines before the document being deserialized, in its file. The loader
    /// parses each `---` document on its own and sets this for the duration
    /// (see [`LineOffset`]), so positions are file positions.
    static LINE_OFFSET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Sets the line offset of [`At`] positions while it lives.
pub(crate) struct LineOffset(u32);

impl LineOffset {
    pub(crate) fn set(lines_before: u32) -> LineOffset {
        LineOffset(LINE_OFFSET.replace(lines_before))
    }

    /// Shift a position read from the current document to a file position.
    pub(crate) fn apply(pos: Pos) -> Pos {
        if pos.is_known() {
            Pos::new(pos.line + LINE_OFFSET.get(), pos.col)
        } else {
            pos
        }
    }
}

impl Drop for LineOffset {
    fn drop(&mut self) {
        LINE_OFFSET.set(self.0);
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<T>::deserialize(d)?;
        Ok(At {
            value: spanned.value,
            pos: LineOffset::apply(spanned.referenced.into()),
        })
    }
}

impl<T: Serialize> Serialize for At<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// The schema of `At<T>` is the schema of `T`: positions are not part of the format.
impl<T: JsonSchema> JsonSchema for At<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}
