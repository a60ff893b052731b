//! The tag splitter on arbitrary bytes, in every syntax: the dispatched
//! `split` and every SIMD backend this CPU has must agree exactly with the
//! byte-at-a-time reference `split_scalar`: the same result, and the same
//! spans (also the ones kept before a bad tag).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_proto::tags::{self, Backend};
use sonde_proto::TagSyntax;

fuzz_target!(|data: &[u8]| {
    let (mut want, mut got) = (Vec::new(), Vec::new());
    for syntax in [TagSyntax::Msgpack, TagSyntax::DogStatsd, TagSyntax::Prefixed] {
        let expected = tags::split_scalar(data, syntax, &mut want);
        let result = tags::split(data, syntax, &mut got);
        assert_eq!(result, expected, "split vs scalar, {syntax:?}");
        assert_eq!(got, want, "split vs scalar spans, {syntax:?}");
        for backend in Backend::ALL.iter().copied().filter(|b| b.is_available()) {
            let result = tags::split_with(backend, data, syntax, &mut got);
            assert_eq!(result, expected, "{backend:?} vs scalar, {syntax:?}");
            assert_eq!(got, want, "{backend:?} vs scalar spans, {syntax:?}");
        }
        // Every span lies inside the input, in order, and does not overlap.
        let mut end = 0;
        for s in &want {
            assert!(s.key_start as usize >= end && s.key_start < s.key_end);
            assert!(s.key_end <= s.value_start && s.value_start <= s.value_end);
            end = s.value_end as usize;
            assert!(end <= data.len());
        }
    }
});
