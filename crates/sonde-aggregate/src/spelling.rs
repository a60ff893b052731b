//! A point's spelling: its kind, tag syntax, name and tags exactly as the
//! client sent them. The shard finds a series by the hash of its spelling
//! ([`raw_hash`]) and confirms it byte for byte ([`spelled_as`]) before it
//! ever splits or sorts tags; a series' further spellings (other tag
//! orders) are kept as [`Alias`]es.

use sonde_proto::{Point, TagSyntax};

use crate::key;
use crate::kind::SeriesKind;

/// A further spelling of a series (another tag order): kind, syntax, name
/// and the tag string exactly as received, pointing at the entry it
/// resolved to. Rare: clients nearly always repeat one order.
#[derive(Debug)]
pub(crate) struct Alias {
    /// `[kind][syntax][name_len u16][name][raw tags]`.
    raw: Box<[u8]>,
    pub(crate) entry: u32,
}

/// Raw spellings kept per series. Clients nearly always repeat one tag
/// order; a client that shuffles tags still resolves through the canonical
/// key, it just does not get a fast-path alias for every order.
pub(crate) const MAX_ALIASES: u8 = 4;

pub(crate) fn syntax_byte(s: TagSyntax) -> u8 {
    match s {
        TagSyntax::Msgpack => 0,
        TagSyntax::DogStatsd => 1,
        TagSyntax::Prefixed => 2,
    }
}

#[inline(always)]
pub(crate) fn raw_hash(kind: SeriesKind, p: &Point<'_>) -> u64 {
    spelling_hash(kind.byte(), syntax_byte(p.tag_syntax), p.name, p.tags)
}

/// The hash of a spelling: kind, syntax, name and raw tags, under a
/// random seed per process.
///
/// # Design
///
/// Hand written, rather than `foldhash` fed three writes, because it is on
/// every point's path: each write of a `Hasher` is a mixing step with its
/// own length dispatch, and the three cost several times the work of one
/// pass over the bytes ("spelling hash in one pass" in
/// `docs/benchmarks/LOG.md`). This takes 16 bytes per folded multiply (the
/// 64x64->128-bit product folded to 64 bits, as foldhash and wyhash do),
/// chained through the name, and apart through the tags. The table only
/// needs a well-spread hash; equal hashes are always confirmed by
/// comparing the bytes. Both lengths are mixed in, so moving bytes between
/// name and tags changes the input.
#[inline(always)]
fn spelling_hash(kind: u8, syntax: u8, name: &[u8], tags: &[u8]) -> u64 {
    let [k0, k1] = *spelling_seeds();
    let head = u64::from(kind) | u64::from(syntax) << 8 | (name.len() as u64) << 16;
    // Name and tags in two independent chains, joined at the end: the
    // multiplies of one do not wait for the other's.
    let name_part = fold_bytes(k0 ^ head, name, k1);
    let tags_part = fold_bytes(k1 ^ tags.len() as u64, tags, k0);
    fold(name_part, tags_part)
}

/// The two seeds of [`spelling_hash`], drawn once per process from the
/// key hasher's random state.
fn spelling_seeds() -> &'static [u64; 2] {
    static SEEDS: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        use std::hash::BuildHasher;
        let state = key::hash_state();
        // Odd, so that no seed zeroes a product.
        [state.hash_one(1u8) | 1, state.hash_one(2u8) | 1]
    })
}

/// The 64x64->128-bit product of `x` and `y`, folded to 64 bits.
#[inline(always)]
fn fold(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    full as u64 ^ (full >> 64) as u64
}

/// Folds `bytes` into `acc`, 16 bytes a step; the last step reads the last
/// 16 bytes (overlapping the one before), and inputs under 16 bytes are
/// read as two overlapping halves.
#[inline(always)]
fn fold_bytes(acc: u64, bytes: &[u8], k: u64) -> u64 {
    let n = bytes.len();
    let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let half = |b: &[u8]| u64::from(u32::from_le_bytes(b[..4].try_into().unwrap_or([0; 4])));
    let (lo, hi) = if n > 16 {
        let mut acc = acc;
        // Every whole 16 bytes but the last, then the last 16.
        let (steps, _) = bytes[..n - 1].as_chunks::<16>();
        for step in steps {
            acc = fold(acc ^ word(&step[..8]), k ^ word(&step[8..]));
        }
        let last = &bytes[n - 16..];
        return fold(acc ^ word(last), k ^ word(&last[8..]));
    } else if n >= 8 {
        (word(bytes), word(&bytes[n - 8..]))
    } else if n >= 4 {
        (half(bytes), half(&bytes[n - 4..]))
    } else if n > 0 {
        (
            u64::from(bytes[0]) | u64::from(bytes[n / 2]) << 8,
            u64::from(bytes[n - 1]),
        )
    } else {
        (0, 0)
    };
    fold(acc ^ lo, k ^ hi)
}

/// The hash [`raw_hash`] gave the first spelling of a stored series.
pub(crate) fn first_spelling_hash(stored: &[u8]) -> u64 {
    let (key, syntax, tags) = key::stored_parts(stored);
    let name = key::split_name(key).map_or(&[][..], |(n, _)| n);
    spelling_hash(key[0], syntax, name, tags)
}

/// True when `p` (recorded as `kind`) is spelled as the first spelling of
/// the stored series: same kind, syntax, name and raw tag bytes.
///
/// The key's head is compared field by field: compared as a slice against
/// a `[kind, len_lo, len_hi]` built on the stack, the 2-byte reload of the
/// byte and 2-byte stores that built it stalled on store forwarding, and
/// was the hottest load of `record_batch` in `perf annotate` of
/// `hot_path statsd 10000` ("StatsD values kept in registers" in
/// `docs/benchmarks/LOG.md`).
#[inline]
pub(crate) fn spelled_as(stored: &[u8], kind: u8, syntax: u8, p: &Point<'_>) -> bool {
    let (key, syn, tags) = key::stored_parts(stored);
    let n = p.name.len();
    match key {
        [k, lo, hi, name @ ..] => {
            same_bytes(tags, p.tags)
                && syn == syntax
                && *k == kind
                && u16::from_le_bytes([*lo, *hi]) == n as u16
                && name.get(..n) == Some(p.name)
        }
        _ => false,
    }
}

/// `a == b`, without a `memcmp` call when both are empty.
///
/// An empty slice's pointer may be dangling (`&[]` is at address 1), and
/// glibc's AVX-512 `memcmp` reads its bytes with a masked load even for
/// length 0. A masked load whose masked-out bytes lie on an unmapped page
/// has its fault suppressed by a microcode assist that costs hundreds of
/// cycles on Intel CPUs: for points without tags, that assist was a large
/// share of the agent's CPU at plain-1k ("empty tags without a `memcmp`" in
/// `docs/benchmarks/LOG.md`).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

impl Alias {
    pub(crate) fn new(kind: u8, p: &Point<'_>, entry: u32) -> Alias {
        let mut raw = Vec::with_capacity(4 + p.name.len() + p.tags.len());
        raw.push(kind);
        raw.push(syntax_byte(p.tag_syntax));
        raw.extend_from_slice(&(p.name.len() as u16).to_le_bytes());
        raw.extend_from_slice(p.name);
        raw.extend_from_slice(p.tags);
        Alias {
            raw: raw.into(),
            entry,
        }
    }

    pub(crate) fn matches(&self, kind: u8, p: &Point<'_>) -> bool {
        let n = p.name.len();
        self.raw.len() == 4 + n + p.tags.len()
            && self.raw[0] == kind
            && self.raw[1] == syntax_byte(p.tag_syntax)
            && self.raw[2..4] == (n as u16).to_le_bytes()
            && self.raw[4..4 + n] == *p.name
            && self.raw[4 + n..] == *p.tags
    }

    /// The hash [`raw_hash`] gave the point this alias was made from.
    pub(crate) fn hash(&self) -> u64 {
        let n = usize::from(u16::from_le_bytes([self.raw[2], self.raw[3]]));
        let (name, tags) = self.raw[4..].split_at(n);
        spelling_hash(self.raw[0], self.raw[1], name, tags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spelling_hash_reads_every_byte_of_name_and_tags_and_where_they_split() {
        // Every length from 0 to 40 (each path of `fold_bytes`), every byte
        // changed in turn, and every split of the same bytes between name
        // and tags: all distinct hashes (a 64-bit collision among these few
        // thousand would be a bug, not bad luck).
        let mut seen = std::collections::HashSet::new();
        let mut count = 0;
        let mut add = |h: u64| {
            count += 1;
            seen.insert(h);
        };
        let text: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for len in 0..=text.len() {
            let bytes = &text[..len];
            for split in 0..=len {
                let (name, tags) = bytes.split_at(split);
                add(spelling_hash(7, 1, name, tags));
            }
            for at in 0..len {
                let mut changed = bytes.to_vec();
                changed[at] ^= 0x20;
                add(spelling_hash(7, 1, &changed, b"env:prod"));
                add(spelling_hash(7, 1, b"m", &changed));
            }
        }
        add(spelling_hash(3, 1, b"m", b"env:prod"));
        add(spelling_hash(7, 0, b"m", b"env:prod"));
        assert_eq!(seen.len(), count);
        // The same input, the same hash.
        assert_eq!(
            spelling_hash(7, 1, b"name", b"a:b,c:d"),
            spelling_hash(7, 1, b"name", b"a:b,c:d")
        );
    }
}
