//! Splits the benchmark's 1 KiB tag string many times, for instruction
//! counting with callgrind: run it with two repeat counts and the
//! difference, divided by the difference of the counts, is one split.
//!
//! ```sh
//! cargo build --release -p sonde-proto --example tag_split
//! for n in 1000 3000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!     target/release/examples/tag_split msgpack 1024 $n
//! done   # (Ir(3000) - Ir(1000)) / 2000 = instructions per split
//! ```
//!
//! Arguments: SYNTAX (`msgpack` or `dogstatsd`), SIZE in bytes, REPEATS,
//! then optionally `scalar` to count `split_scalar` instead of `split`,
//! `avx2` (x86-64) to run the AVX2 backend where `split` would pick
//! another, and `varied` to cycle through 64 strings of SIZE bytes whose tags are 6
//! to 33 bytes long (pseudo-random, fixed seed) instead of the one string,
//! so that branch predictors cannot learn the input. The one string is
//! built as `tag_string` in `benches/parse.rs` builds it.

use std::hint::black_box;

#[path = "../benches/common/tag_input.rs"]
mod tag_input;

use sonde_proto::tags;
use sonde_proto::TagSyntax;
use tag_input::{tag_string, varied_string};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: tag_split msgpack|dogstatsd SIZE REPEATS [scalar|avx2] [varied]";
    let syntax = match args.get(1).map(String::as_str) {
        Some("msgpack") => TagSyntax::Msgpack,
        Some("dogstatsd") => TagSyntax::DogStatsd,
        _ => panic!("{usage}"),
    };
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).expect(usage);
    let repeats: usize = args.get(3).and_then(|s| s.parse().ok()).expect(usage);
    let scalar = args[4..].iter().any(|a| a == "scalar");
    #[cfg(target_arch = "x86_64")]
    let backend = args[4..]
        .iter()
        .any(|a| a == "avx2")
        .then_some(tags::Backend::Avx2);
    #[cfg(not(target_arch = "x86_64"))]
    let backend: Option<tags::Backend> = None;
    let strings: Vec<Vec<u8>> = if args[4..].iter().any(|a| a == "varied") {
        (0..64).map(|i| varied_string(size, syntax, i)).collect()
    } else {
        vec![tag_string(size, syntax)]
    };
    let mut spans = Vec::with_capacity(128);
    let mut total = 0;
    for i in 0..repeats {
        let raw = &strings[i % strings.len()];
        let result = if scalar {
            tags::split_scalar(black_box(raw), syntax, &mut spans)
        } else if let Some(b) = backend {
            tags::split_with(b, black_box(raw), syntax, &mut spans)
        } else {
            tags::split(black_box(raw), syntax, &mut spans)
        };
        result.expect("the input is valid");
        total += spans.len();
    }
    println!("{total}");
}
