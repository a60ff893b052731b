//! The Kafka protocol's primitive types: big-endian integers, strings
//! with an `i16` length, arrays with an `i32` count, and the zigzag
//! varints of record batches. Writing appends to a `Vec<u8>`; reading
//! goes through [`Reader`], which returns [`Malformed`] for a truncated
//! or inconsistent input instead of panicking.

/// A response or record batch that does not parse: what was being read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed Kafka data: {0}")]
pub struct Malformed(pub &'static str);

pub(crate) fn put_i8(b: &mut Vec<u8>, v: i8) {
    b.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i16(b: &mut Vec<u8>, v: i16) {
    b.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i32(b: &mut Vec<u8>, v: i32) {
    b.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_be_bytes());
}

/// A string with an `i16` length. Longer strings than Kafka allows
/// (32,767 bytes) are refused by the caller before it gets here.
pub(crate) fn put_str(b: &mut Vec<u8>, s: &str) {
    put_i16(b, i16::try_from(s.len()).unwrap_or(i16::MAX));
    b.extend_from_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

/// A nullable string: length -1 for `None`.
pub(crate) fn put_nullable_str(b: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => put_i16(b, -1),
    }
}

pub(crate) fn set_i32(b: &mut [u8], at: usize, v: i32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Appends `v` as a zigzag varint (Kafka's `varint` and `varlong`).
#[inline]
pub(crate) fn put_varint(b: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        b.push((u as u8) | 0x80);
        u >>= 7;
    }
    b.push(u as u8);
}

/// Bytes [`put_varint`] writes for `v`.
#[inline]
pub(crate) fn varint_len(v: i64) -> usize {
    let u = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (u | 1).leading_zeros() as usize).div_ceil(7)
}

/// A cursor over a response or a record batch.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads `data` from its start.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { rest: data }
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if n > self.rest.len() {
            return Err(Malformed(what));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Malformed> {
        let b = self.bytes(N, what)?;
        Ok(b.try_into().expect("N bytes"))
    }

    /// An `i8`.
    pub fn i8(&mut self, what: &'static str) -> Result<i8, Malformed> {
        self.array::<1>(what).map(i8::from_be_bytes)
    }

    /// An `i16`.
    pub fn i16(&mut self, what: &'static str) -> Result<i16, Malformed> {
        self.array::<2>(what).map(i16::from_be_bytes)
    }

    /// An `i32`.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        self.array::<4>(what).map(i32::from_be_bytes)
    }

    /// An `i64`.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, Malformed> {
        self.array::<8>(what).map(i64::from_be_bytes)
    }

    /// A nullable string (`None` for length -1), lossily decoded.
    pub fn nullable_str(&mut self, what: &'static str) -> Result<Option<String>, Malformed> {
        let n = self.i16(what)?;
        if n < 0 {
            return Ok(None);
        }
        let b = self.bytes(n as usize, what)?;
        Ok(Some(String::from_utf8_lossy(b).into_owned()))
    }

    /// A string (null read as empty).
    pub fn str(&mut self, what: &'static str) -> Result<String, Malformed> {
        Ok(self.nullable_str(what)?.unwrap_or_default())
    }

    /// An array's count (-1, a null array, read as 0), checked against
    /// what is left so that a corrupt count cannot make the caller loop
    /// or allocate for long: every element takes at least `min_size`
    /// bytes.
    pub fn count(&mut self, min_size: usize, what: &'static str) -> Result<usize, Malformed> {
        let n = self.i32(what)?;
        let n = usize::try_from(n).unwrap_or(0);
        if n.saturating_mul(min_size.max(1)) > self.rest.len() {
            return Err(Malformed(what));
        }
        Ok(n)
    }

    /// Skips an array of `i32`.
    pub fn skip_i32_array(&mut self, what: &'static str) -> Result<(), Malformed> {
        let n = self.count(4, what)?;
        self.bytes(n * 4, what).map(|_| ())
    }

    /// A zigzag varint of at most 10 bytes.
    pub fn varint(&mut self, what: &'static str) -> Result<i64, Malformed> {
        let mut u: u64 = 0;
        for i in 0..10 {
            let [b] = self.array::<1>(what)?;
            u |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(((u >> 1) as i64) ^ -((u & 1) as i64));
            }
        }
        Err(Malformed(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varints_match_the_protocol_examples() {
        // Zigzag: 0 -> 0, -1 -> 1, 1 -> 2, 63 -> 126, -65 -> 129 (two bytes).
        for (v, want) in [
            (0i64, &[0u8][..]),
            (-1, &[1]),
            (1, &[2]),
            (63, &[126]),
            (-65, &[0x81, 0x01]),
            (300, &[0xd8, 0x04]),
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b, want, "{v}");
            assert_eq!(varint_len(v), want.len(), "{v}");
        }
    }

    proptest! {
        #[test]
        fn varints_round_trip(v in any::<i64>()) {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            prop_assert_eq!(b.len(), varint_len(v));
            let mut r = Reader::new(&b);
            prop_assert_eq!(r.varint("v").unwrap(), v);
            prop_assert!(r.rest().is_empty());
        }

        #[test]
        fn reading_garbage_errs_and_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&data);
            let _ = r.count(1, "n");
            let _ = r.nullable_str("s");
            let _ = r.varint("v");
            let _ = r.i64("i");
        }
    }

    #[test]
    fn a_count_larger_than_what_is_left_is_malformed() {
        let mut b = Vec::new();
        put_i32(&mut b, 1_000_000);
        b.extend_from_slice(&[0; 16]);
        assert_eq!(
            Reader::new(&b).count(4, "brokers"),
            Err(Malformed("brokers"))
        );
    }
}
