//! The JSON Schema of the desired-state format, generated from the types.
//!
//! Draft-07, because that is what yaml-language-server (and so most editors)
//! understands. The checked-in `schemas/poolwright.schema.json` is this output; a
//! test fails when they differ.

use schemars::generate::SchemaSettings;

use super::types::AnyDocument;

const SCHEMA_ID: &str = "https://poolwright.dev/schemas/poolwright.schema.json";

pub fn json_schema() -> serde_json::Value {
    let generator = SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<AnyDocument>();
    schema.insert("$id".into(), SCHEMA_ID.into());
    schema.insert("title".into(), "poolwright desired-state document".into());
    schema.insert(
        "description".into(),
        "One document (Provider, Cluster or NodePool) of a poolwright desired-state directory."
            .into(),
    );
    schema.to_value()
}

/// The schema as the checked-in file holds it: pretty JSON and a final newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("a schema is valid JSON");
    text.push('\n');
    text
}
