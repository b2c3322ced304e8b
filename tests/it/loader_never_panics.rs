//! Property test (the stable-toolchain companion of `fuzz/`): whatever bytes a
//! file holds, loading returns diagnostics or a config, never a panic, and a
//! config is returned only when there is no error.

use poolwright::spec::Limits;
use poolwright::spec::load::{SourceFile, parse_file};
use poolwright::spec::validate::load_sources;
use proptest::prelude::*;

const SEED: &str = include_str!("../../examples/pools/web.yaml");

fn check(bytes: Vec<u8>) {
    let file = SourceFile {
        display: "fuzz.yaml".into(),
        bytes,
    };
    let limits = Limits::default();
    let _ = parse_file(&file, &limits);
    let report = load_sources(&[file], &limits);
    assert_eq!(report.config.is_some(), report.errors().next().is_none());
    for d in &report.diagnostics {
        assert!(d.line >= 1 && d.column >= 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check(bytes);
    }

    #[test]
    fn mutated_valid_documents(edits in proptest::collection::vec((0usize..2000, any::<u8>()), 1..8), cut in 0usize..2000) {
        let mut bytes = SEED.as_bytes().to_vec();
        for (at, b) in edits {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        bytes.truncate(cut.max(1).min(bytes.len()));
        check(bytes);
    }

    #[test]
    fn yaml_shaped_noise(text in "([a-zA-Z]{1,8}: ?(\\[|\\{|&a|\\*a|-|\"|'|[0-9%]{1,4}|no|~)?\n|---\n|  |- ){0,40}") {
        check(text.into_bytes());
    }
}
