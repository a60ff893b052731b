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
//! and `varied` to cycle through 64 strings of SIZE bytes whose tags are 6
//! to 33 bytes long (pseudo-random, fixed seed) instead of the one string,
//! so that branch predictors cannot learn the input. The one string is
//! built as `tag_string` in `benches/parse.rs` builds it.

use std::hint::black_box;

use sonde_proto::tags;
use sonde_proto::TagSyntax;

/// `key00=value_0000|key01=value_0001|...` cut to `len` bytes and ending
/// on a whole tag: the input of the `tags/split` benchmark.
fn tag_string(len: usize, syntax: TagSyntax) -> Vec<u8> {
    let (sep, kv) = match syntax {
        TagSyntax::Msgpack => (b'|', b'='),
        TagSyntax::DogStatsd => (b',', b':'),
    };
    let mut s = Vec::new();
    let mut i = 0;
    while s.len() < len {
        if !s.is_empty() {
            s.push(sep);
        }
        s.extend_from_slice(format!("key{:02}{}value_{:04}", i % 100, kv as char, i).as_bytes());
        i += 1;
    }
    s.truncate(len);
    let last = s.iter().rposition(|&b| b == sep).map_or(0, |p| p + 1);
    if !s[last..].contains(&kv) {
        s[len - 1] = kv;
        if len - last == 1 {
            s[len - 1] = sep;
        }
    }
    s
}

/// A tag string of `len` bytes with tags of 6 to 33 bytes, the lengths
/// drawn from `seed`; ends on a whole tag like [`tag_string`].
fn varied_string(len: usize, syntax: TagSyntax, seed: u64) -> Vec<u8> {
    let (sep, kv) = match syntax {
        TagSyntax::Msgpack => (b'|', b'='),
        TagSyntax::DogStatsd => (b',', b':'),
    };
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n) as usize
    };
    let mut s = Vec::new();
    while s.len() < len {
        if !s.is_empty() {
            s.push(sep);
        }
        s.extend(std::iter::repeat_n(b'k', 1 + next(12)));
        s.push(kv);
        s.extend(std::iter::repeat_n(b'v', 4 + next(17)));
    }
    s.truncate(len);
    let last = s.iter().rposition(|&b| b == sep).map_or(0, |p| p + 1);
    if !s[last..].contains(&kv) {
        s[len - 1] = kv;
        if len - last == 1 {
            s[len - 1] = sep;
        }
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: tag_split msgpack|dogstatsd SIZE REPEATS [scalar]";
    let syntax = match args.get(1).map(String::as_str) {
        Some("msgpack") => TagSyntax::Msgpack,
        Some("dogstatsd") => TagSyntax::DogStatsd,
        _ => panic!("{usage}"),
    };
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).expect(usage);
    let repeats: usize = args.get(3).and_then(|s| s.parse().ok()).expect(usage);
    let scalar = args[4..].iter().any(|a| a == "scalar");
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
        } else {
            tags::split(black_box(raw), syntax, &mut spans)
        };
        result.expect("the input is valid");
        total += spans.len();
    }
    println!("{total}");
}
