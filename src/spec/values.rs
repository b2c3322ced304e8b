//! Scalar value types of the desired-state format: durations, integer-or-percentage
//! budgets, percentages, weekdays and times of day. Each parses from the YAML text
//! users write and says what it expected when it cannot.

use std::borrow::Cow;
use std::fmt;

use super::located::At;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest duration any setting takes: a longer wait is a typo, not a plan
/// (and `9999999999h` would otherwise be a wait that never ends).
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// The most nodes one pool may have (size, autoscaling bounds, budgets as
/// counts, the circuit breaker): far beyond any real pool, and small enough
/// that no arithmetic or allocation on it can overflow or exhaust memory.
pub const MAX_POOL_SIZE: i64 = 100_000;

/// The largest surge percentage (unavailable stops at 100%): 1000% is eleven
/// times the pool, which is already more than any quota grants.
pub const MAX_SURGE_PERCENT: i64 = 1000;

/// The most live nodes a simulator's quota may name.
pub const MAX_QUOTA: u32 = 10_000_000;

/// An integer written as a YAML number. A quoted `"2"` is a string in YAML; it
/// is refused with the fix rather than read as a number, so the file means
/// what every other YAML tool reads in it.
struct Unquoted(i64);

impl<'de> Deserialize<'de> for Unquoted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Unquoted;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Unquoted, E> {
                Ok(Unquoted(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Unquoted, E> {
                i64::try_from(v)
                    .map(Unquoted)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Unquoted, E> {
                Err(E::custom(format!("expected a whole number, found {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Unquoted, E> {
                if v.trim().parse::<i128>().is_ok() {
                    Err(E::custom(format!(
                        "the number {v:?} is quoted, which makes it a string: write it unquoted, as {}",
                        v.trim()
                    )))
                } else {
                    Err(E::custom(format!(
                        "expected a whole number, found the string {v:?}"
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `deserialize_with` for a whole number that must be written unquoted.
pub fn unquoted_int<'de, D: Deserializer<'de>>(d: D) -> Result<At<i64>, D::Error> {
    let at = At::<Unquoted>::deserialize(d)?;
    Ok(At::new(at.value.0, at.pos))
}

/// [`unquoted_int`] for an optional field (with `#[serde(default)]`).
pub fn unquoted_int_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<At<i64>>, D::Error> {
    unquoted_int(d).map(Some)
}

/// [`unquoted_int`] for an optional count that fits `u32`.
pub fn unquoted_u32_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let at = unquoted_int(d)?;
    u32::try_from(at.value)
        .map(Some)
        .map_err(|_| de::Error::custom(format!("{} is outside 0 to {}", at.value, u32::MAX)))
}

/// A value a user wrote that does not parse, and why (with the value), as
/// it is shown at the value's position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub String);

impl From<String> for InvalidValue {
    fn from(why: String) -> InvalidValue {
        InvalidValue(why)
    }
}

impl InvalidValue {
    /// Whether the message says what was expected (a word that is not a
    /// duration gets the other choices named after it).
    pub fn contains(&self, what: &str) -> bool {
        self.0.contains(what)
    }
}

/// A non-negative duration written as `30s`, `10m`, `4h`, `1h30m` or `500ms`.
///
/// Parsing is jiff's "friendly" duration format; a bare number is refused because
/// `timeout: 30` could mean seconds or minutes and we will not guess.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub const ZERO: Duration = Duration(std::time::Duration::ZERO);

    pub const fn secs(s: u64) -> Self {
        Duration(std::time::Duration::from_secs(s))
    }

    pub fn as_std(self) -> std::time::Duration {
        self.0
    }

    pub fn parse(text: &str) -> Result<Self, InvalidValue> {
        let expected = "expected a duration such as \"30s\", \"10m\", \"4h\" or \"1h30m\"";
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(InvalidValue(format!(
                "invalid duration {text:?}: {expected} (a unit is required)"
            )));
        }
        let parsed: jiff::SignedDuration = trimmed
            .parse()
            .map_err(|_| InvalidValue(format!("invalid duration {text:?}: {expected}")))?;
        if parsed.is_negative() {
            return Err(InvalidValue(format!(
                "invalid duration {text:?}: must not be negative"
            )));
        }
        let value = parsed.unsigned_abs();
        if value > MAX_DURATION {
            return Err(InvalidValue(format!(
                "invalid duration {text:?}: at most 30 days (720h) is allowed"
            )));
        }
        Ok(Duration(value))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
        let printer = SpanPrinter::new()
            .designator(Designator::Compact)
            .spacing(Spacing::None);
        f.write_str(&printer.unsigned_duration_to_string(&self.0))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"30s\", \"10m\", \"4h\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: a unit is required, such as \"{v}s\" or \"{v}m\""
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: a non-negative value with a unit is required"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration with units, e.g. \"30s\", \"10m\", \"4h\", \"1h30m\".",
            "pattern": "^\\s*\\d",
            "examples": ["30s", "10m", "1h30m"]
        })
    }
}

/// A node lifetime: `30d`, `720h`, `12h`; days are 24 hours. At least one
/// hour, at most ten years (3650d).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Age(pub Duration);

impl Age {
    pub const MIN: std::time::Duration = std::time::Duration::from_secs(3600);
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(3650 * 24 * 3600);

    pub fn parse(text: &str) -> Result<Age, InvalidValue> {
        let expected = "expected a node lifetime such as \"30d\", \"720h\" or \"12h\"";
        let d = parse_days(text, expected)?;
        if !(Age::MIN..=Age::MAX).contains(&d) {
            return Err(InvalidValue(format!(
                "invalid age {text:?}: at least 1h and at most 3650d"
            )));
        }
        Ok(Age(Duration(d)))
    }
}

/// A length of time with units, days being 24 hours (`3d`, `36h`, `90m`).
fn parse_days(text: &str, expected: &str) -> Result<std::time::Duration, InvalidValue> {
    {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(InvalidValue(format!(
                "invalid age {text:?}: {expected} (a unit is required)"
            )));
        }
        let span: jiff::Span = trimmed
            .parse()
            .map_err(|_| InvalidValue(format!("invalid age {text:?}: {expected}")))?;
        let d = span
            .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
            .map_err(|_| InvalidValue(format!("invalid age {text:?}: {expected} (weeks, months and years are not fixed lengths; write days)")))?;
        if d.is_negative() {
            return Err(InvalidValue(format!(
                "invalid age {text:?}: must not be negative"
            )));
        }
        Ok(d.unsigned_abs())
    }
}

/// How old an image must be before a channel picks it: `3d`, `36h`,
/// `0s`; days are 24 hours; at most 365d.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleaseAge(pub Duration);

impl ReleaseAge {
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

    pub fn parse(text: &str) -> Result<ReleaseAge, InvalidValue> {
        let expected = "expected an age such as \"3d\", \"36h\" or \"0s\"";
        if text.trim() == "0" {
            return Ok(ReleaseAge(Duration::ZERO));
        }
        let d = parse_days(text, expected)?;
        if d > ReleaseAge::MAX {
            return Err(InvalidValue(format!("invalid age {text:?}: at most 365d")));
        }
        Ok(ReleaseAge(Duration(d)))
    }
}

impl fmt::Display for ReleaseAge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Age(self.0).fmt(f)
    }
}

impl<'de> Deserialize<'de> for ReleaseAge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ReleaseAge;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an age such as \"3d\" or \"36h\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReleaseAge, E> {
                ReleaseAge::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ReleaseAge, E> {
                ReleaseAge::parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ReleaseAge {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for ReleaseAge {
    fn schema_name() -> Cow<'static, str> {
        "ReleaseAge".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "An image age with units, days being 24 hours: \"3d\", \"36h\", \"0s\"; at most 365d.",
            "pattern": "^\\s*\\d",
            "examples": ["3d", "36h", "0s"]
        })
    }
}

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_std().as_secs();
        if secs.is_multiple_of(86_400) {
            write!(f, "{}d", secs / 86_400)
        } else {
            self.0.fmt(f)
        }
    }
}

impl<'de> Deserialize<'de> for Age {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Age;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a node lifetime such as \"30d\" or \"720h\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Age, E> {
                Age::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Age, E> {
                Err(E::custom(format!(
                    "invalid age {v}: a unit is required, such as \"{v}d\" or \"{v}h\""
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Age, E> {
                Err(E::custom(format!(
                    "invalid age {v}: a non-negative value with a unit is required"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Age {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for Age {
    fn schema_name() -> Cow<'static, str> {
        "Age".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A node lifetime with units, days being 24 hours: \"30d\", \"720h\"; 1h to 3650d.",
            "pattern": "^\\s*\\d",
            "examples": ["30d", "90d", "720h"]
        })
    }
}

/// A time limit that may be switched off, but only in writing: a duration,
/// or `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    None,
    After(Duration),
}

impl Limit {
    pub fn duration(self) -> Option<Duration> {
        match self {
            Limit::None => None,
            Limit::After(d) => Some(d),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::None => f.write_str("none"),
            Limit::After(d) => d.fmt(f),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"30m\", or \"none\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Limit, E> {
                if v.trim() == "none" {
                    return Ok(Limit::None);
                }
                // A word that is not a duration gets the other choice named.
                Duration::parse(v).map(Limit::After).map_err(|e| match e {
                    e if e.contains("expected a duration") => {
                        E::custom(format!("{e}, or \"none\""))
                    }
                    e => E::custom(e),
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Limit, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: a unit is required, such as \"{v}s\" or \"{v}m\" (or \"none\")"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Limit, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: a non-negative value with a unit is required (or \"none\")"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for Limit {
    fn schema_name() -> Cow<'static, str> {
        "Limit".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration with units (\"30m\", \"1h30m\"), or \"none\" for no limit.",
            "pattern": "^\\s*(\\d|none\\s*$)",
            "examples": ["30m", "2h", "none"]
        })
    }
}

/// An absolute count or a percentage of the pool's desired size (`2` or `"25%"`).
///
/// Negative numbers are kept as written so validation can say "must not be
/// negative" at the right place instead of a generic type error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    Int(i64),
    Percent(i64),
}

impl IntOrPercent {
    pub fn is_negative(self) -> bool {
        matches!(self, IntOrPercent::Int(n) | IntOrPercent::Percent(n) if n < 0)
    }

    /// Literal zero, as written (not as resolved against a size).
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }

    pub fn parse(text: &str) -> Result<Self, InvalidValue> {
        let expected = "expected an integer or a percentage such as \"25%\"";
        let t = text.trim();
        let Some(number) = t.strip_suffix('%') else {
            return Err(InvalidValue(format!("invalid value {text:?}: {expected}")));
        };
        number
            .parse::<i64>()
            .map(IntOrPercent::Percent)
            .map_err(|_| InvalidValue(format!("invalid percentage {text:?}: {expected}")))
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrPercent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a percentage such as \"25%\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                Ok(IntOrPercent::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                i64::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                IntOrPercent::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Int(n) => s.serialize_i64(*n),
            IntOrPercent::Percent(_) => s.collect_str(self),
        }
    }
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> Cow<'static, str> {
        "IntOrPercent".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A node count, or a percentage of the desired size such as \"25%\".",
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_POOL_SIZE},
                {"type": "string", "pattern": "^[0-9]{1,4}%$"}
            ]
        })
    }
}

/// A percentage written as `"50%"` (checkpoints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent(pub i64);

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrPercent::deserialize(d)? {
            IntOrPercent::Percent(p) => Ok(Percent(p)),
            IntOrPercent::Int(n) => Err(de::Error::custom(format!(
                "invalid value {n}: expected a percentage such as \"{n}%\""
            ))),
        }
    }
}

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}%", self.0))
    }
}

impl JsonSchema for Percent {
    fn schema_name() -> Cow<'static, str> {
        "Percent".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^[0-9]+%$", "examples": ["50%"]})
    }
}

/// A day of the week, written with its three-letter English name.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Weekday {
    pub const ALL: [Weekday; 7] = [
        Weekday::Mon,
        Weekday::Tue,
        Weekday::Wed,
        Weekday::Thu,
        Weekday::Fri,
        Weekday::Sat,
        Weekday::Sun,
    ];

    pub fn to_jiff(self) -> jiff::civil::Weekday {
        use jiff::civil::Weekday as J;
        match self {
            Weekday::Mon => J::Monday,
            Weekday::Tue => J::Tuesday,
            Weekday::Wed => J::Wednesday,
            Weekday::Thu => J::Thursday,
            Weekday::Fri => J::Friday,
            Weekday::Sat => J::Saturday,
            Weekday::Sun => J::Sunday,
        }
    }
}

/// A wall-clock time of day, `HH:MM` in 24-hour form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeOfDay(pub jiff::civil::Time);

impl TimeOfDay {
    pub fn parse(text: &str) -> Result<Self, InvalidValue> {
        let bad = || {
            InvalidValue(format!(
                "invalid time of day {text:?}: expected HH:MM in 24-hour form, such as \"02:00\""
            ))
        };
        let (h, m) = text.split_once(':').ok_or_else(bad)?;
        if h.len() != 2 || m.len() != 2 {
            return Err(bad());
        }
        let h: i8 = h.parse().map_err(|_| bad())?;
        let m: i8 = m.parse().map_err(|_| bad())?;
        jiff::civil::Time::new(h, m, 0, 0)
            .map(TimeOfDay)
            .map_err(|_| bad())
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.0.hour(), self.0.minute())
    }
}

impl<'de> Deserialize<'de> for TimeOfDay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        TimeOfDay::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for TimeOfDay {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for TimeOfDay {
    fn schema_name() -> Cow<'static, str> {
        "TimeOfDay".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$", "examples": ["02:00"]})
    }
}

/// Parse a five-field cron expression in the IANA zone `tz`.
pub fn parse_cron(expr: &str, tz: &str) -> Result<cronexpr::Crontab, InvalidValue> {
    cronexpr::parse_crontab(&format!("{expr} {tz}")).map_err(|e| {
        // cronexpr quotes the input and puts the reason after a caret: keep the reason.
        let text = e.to_string();
        InvalidValue(
            text.lines()
                .rev()
                .find_map(|l| l.trim_start().strip_prefix("^ "))
                .unwrap_or(text.lines().next().unwrap_or("invalid cron expression"))
                .to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_only() {
        assert_eq!(Duration::parse("30s").unwrap(), Duration::secs(30));
        assert_eq!(Duration::parse("10m").unwrap(), Duration::secs(600));
        assert_eq!(Duration::parse("1h30m").unwrap(), Duration::secs(5400));
        assert_eq!(Duration::parse("4h").unwrap(), Duration::secs(14400));
        assert!(
            Duration::parse("30")
                .unwrap_err()
                .contains("unit is required")
        );
        assert!(
            Duration::parse("soon")
                .unwrap_err()
                .contains("expected a duration")
        );
        assert!(Duration::parse("-5m").unwrap_err().contains("negative"));
        assert_eq!(Duration::secs(5400).to_string(), "1h30m");
    }

    #[test]
    fn int_or_percent_parses_and_keeps_sign() {
        assert_eq!(
            IntOrPercent::parse("25%").unwrap(),
            IntOrPercent::Percent(25)
        );
        assert!(IntOrPercent::parse("-5%").unwrap().is_negative());
        assert!(IntOrPercent::parse("25").is_err());
        assert!(IntOrPercent::parse("2.5%").is_err());
        assert!(IntOrPercent::parse("%").is_err());
    }

    #[test]
    fn time_of_day_is_strict() {
        assert_eq!(TimeOfDay::parse("02:00").unwrap().to_string(), "02:00");
        assert!(TimeOfDay::parse("2:00").is_err());
        assert!(TimeOfDay::parse("24:00").is_err());
        assert!(TimeOfDay::parse("12:60").is_err());
    }
}
