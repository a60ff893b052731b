//! The configuration loader on arbitrary text: it must return a config or
//! an error, never panic, and an error must say something a person can act
//! on (it is printed as is by `sonde validate`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = sonde::config::parse(text) {
        assert!(!e.to_string().trim().is_empty(), "an empty error message");
    }
});
