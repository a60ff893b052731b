//! The configuration loader on arbitrary text: it must return a config or
//! an error, never panic, and an error must say something a person can act
//! on (it is printed as is by `sonde validate`) at a line the file has.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = sonde::config::parse(text) {
        assert!(
            !e.problem.trim().is_empty(),
            "an error without a problem: {e:?}"
        );
        // A line, when given, is one of the file's (or the end of it).
        if let Some(line) = e.line {
            assert!(
                line >= 1 && line <= text.lines().count() + 1,
                "line {line} outside the file: {e:?}"
            );
        }
    }
});
