//! One libFuzzer binary for every target of `lazaret::fuzzing`; the
//! target is named in `LAZARET_FUZZ_TARGET` (scripts/fuzz.sh sets it).
#![no_main]

use std::sync::OnceLock;

static TARGET: OnceLock<fn(&[u8])> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let f = TARGET.get_or_init(|| {
        let name = std::env::var("LAZARET_FUZZ_TARGET").unwrap_or_default();
        lazaret::fuzzing::target(&name).unwrap_or_else(|| {
            let all: Vec<&str> = lazaret::fuzzing::TARGETS.iter().map(|(n, _)| *n).collect();
            eprintln!("LAZARET_FUZZ_TARGET={name:?}: not one of {}", all.join(", "));
            std::process::exit(2)
        })
    });
    f(data)
});
