//! Tag strings for the `tags/split` benchmark and the `tag_split` example,
//! so that both measure the same input. The example includes this file
//! with `#[path]`.

use sonde_proto::TagSyntax;

/// The tag separator and key/value separator of `syntax`.
fn separators(syntax: TagSyntax) -> (u8, u8) {
    match syntax {
        TagSyntax::Msgpack => (b'|', b'='),
        TagSyntax::DogStatsd => (b',', b':'),
        TagSyntax::Prefixed => panic!("the benchmarks split separated syntaxes"),
    }
}

/// A tag string of exactly `len` bytes written like a real client's
/// (`key00=value_0000|key01=value_0001|...`, 17 bytes a tag), in `syntax`.
pub fn tag_string(len: usize, syntax: TagSyntax) -> Vec<u8> {
    let (sep, kv) = separators(syntax);
    let mut s = Vec::new();
    let mut i = 0;
    while s.len() < len {
        if !s.is_empty() {
            s.push(sep);
        }
        s.extend_from_slice(format!("key{:02}{}value_{:04}", i % 100, kv as char, i).as_bytes());
        i += 1;
    }
    end_on_whole_tag(s, len, sep, kv)
}

/// A tag string of `len` bytes with tags of 6 to 33 bytes, the lengths
/// drawn from `seed`; ends on a whole tag like [`tag_string`].
#[allow(dead_code)] // used by the example only
pub fn varied_string(len: usize, syntax: TagSyntax, seed: u64) -> Vec<u8> {
    let (sep, kv) = separators(syntax);
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
    end_on_whole_tag(s, len, sep, kv)
}

/// Cuts `s` to `len` bytes. A cut can leave a bare key (`|ke`), which
/// msgpack rejects: end every string on a valid tag so that each size
/// splits all of its bytes.
fn end_on_whole_tag(mut s: Vec<u8>, len: usize, sep: u8, kv: u8) -> Vec<u8> {
    s.truncate(len);
    let last = s.iter().rposition(|&b| b == sep).map_or(0, |p| p + 1);
    if !s[last..].contains(&kv) {
        s[len - 1] = kv;
        if len - last == 1 {
            // A one-byte tail cannot be `k=`: make it an empty segment.
            s[len - 1] = sep;
        }
    }
    s
}
