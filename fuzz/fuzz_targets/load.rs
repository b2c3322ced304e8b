//! Fuzz the desired-state loader: any bytes in a file must yield diagnostics or
//! a config, never a panic, and a config only when there is no error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolwright::spec::Limits;
use poolwright::spec::load::SourceFile;
use poolwright::spec::validate::load_sources;

fuzz_target!(|data: &[u8]| {
    let file = SourceFile {
        display: "fuzz.yaml".into(),
        bytes: data.to_vec(),
    };
    let report = load_sources(&[file], &Limits::default());
    assert_eq!(report.config.is_some(), report.errors().next().is_none());
});
