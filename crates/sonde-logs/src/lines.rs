//! Splitting the bytes of a file into lines, whatever the chunks it was
//! read in.
//!
//! A [`Splitter`] follows one file from a starting offset. The caller pushes
//! each chunk it read, in file order, and the splitter hands back every line
//! the chunk completes as a [`Line`] borrowing the chunk, with the file
//! offsets of the line's first byte and of the byte after its newline. The
//! rules:
//!
//! * `\n` ends a line; the line's bytes exclude it, and a `\r` just before
//!   it is removed too.
//! * A last line without its newline waits in the splitter (copied, since the
//!   caller reuses its read buffer) until a later chunk brings the newline,
//!   or until the caller decides it will never come and calls
//!   [`Splitter::flush`].
//! * A line longer than `max_line_bytes` is handed back as its first
//!   `max_line_bytes` bytes; the rest is dropped and reported in
//!   [`Line::cut_bytes`]. The splitter never keeps more than
//!   `max_line_bytes` bytes of a waiting line, so a file without newlines
//!   costs bounded memory.

use memchr::memchr;

/// One line of a file, as handed back by a [`Splitter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line's bytes without its `\n` and without a `\r` before it; at
    /// most `max_line_bytes` of them.
    pub bytes: &'a [u8],
    /// File offset of the line's first byte.
    pub start: u64,
    /// File offset just after the line's newline (or after its last byte for
    /// a line handed back by [`Splitter::flush`]): where reading resumes once
    /// this line is acknowledged.
    pub end: u64,
    /// How many bytes of the line were dropped because it was longer than
    /// `max_line_bytes` (0 for a line that was kept whole).
    pub cut_bytes: u64,
}

impl Line<'_> {
    /// Whether the line was cut at `max_line_bytes`.
    pub fn is_cut(&self) -> bool {
        self.cut_bytes > 0
    }
}

/// Turns the chunks of one file into lines; see the [module docs](self).
#[derive(Debug)]
pub struct Splitter {
    max_line_bytes: usize,
    /// File offset of the next byte [`Splitter::push`] expects.
    next: u64,
    /// The kept head of the waiting line: at most `max_line_bytes` bytes.
    carry: Vec<u8>,
    /// File offset of the waiting line's first byte.
    carry_start: u64,
    /// Every byte of the waiting line seen so far, kept or dropped; 0 when no
    /// line is waiting.
    carry_len: u64,
    /// The waiting line's last byte, so that a `\r` before the newline is
    /// recognised even when it fell in the dropped part.
    carry_last: u8,
}

impl Splitter {
    /// A splitter whose first pushed chunk starts at file offset `offset`.
    ///
    /// # Panics
    ///
    /// If `max_line_bytes` is 0.
    pub fn new(offset: u64, max_line_bytes: usize) -> Self {
        assert!(max_line_bytes > 0, "max_line_bytes must be at least 1");
        Self {
            max_line_bytes,
            next: offset,
            carry: Vec::new(),
            carry_start: offset,
            carry_len: 0,
            carry_last: 0,
        }
    }

    /// File offset of the next byte [`Splitter::push`] expects: the end of
    /// everything pushed so far.
    pub fn offset(&self) -> u64 {
        self.next
    }

    /// The file offset of the waiting last line's first byte, if a line is
    /// waiting for its newline.
    pub fn waiting(&self) -> Option<u64> {
        (self.carry_len > 0).then_some(self.carry_start)
    }

    /// Forgets any waiting line and expects the next chunk at `offset`, as
    /// after a truncation.
    pub fn reset(&mut self, offset: u64) {
        self.next = offset;
        self.carry.clear();
        self.carry_start = offset;
        self.carry_len = 0;
    }

    /// Splits `chunk`, the file's bytes from [`Splitter::offset`] on, and
    /// calls `emit` with every line it completes, in file order. A trailing
    /// part without a newline waits for the next push.
    pub fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(&Line<'_>)) {
        let base = self.next;
        self.next += chunk.len() as u64;
        let mut pos = 0;
        if self.carry_len > 0 {
            let Some(nl) = memchr(b'\n', chunk) else {
                self.extend_carry(chunk);
                return;
            };
            self.extend_carry(&chunk[..nl]);
            self.emit_carry(base + nl as u64 + 1, &mut emit);
            pos = nl + 1;
        }
        while let Some(nl) = memchr(b'\n', &chunk[pos..]) {
            let mut bytes = &chunk[pos..pos + nl];
            if let [head @ .., b'\r'] = bytes {
                bytes = head;
            }
            let kept = bytes.len().min(self.max_line_bytes);
            emit(&Line {
                bytes: &bytes[..kept],
                start: base + pos as u64,
                end: base + (pos + nl + 1) as u64,
                cut_bytes: (bytes.len() - kept) as u64,
            });
            pos += nl + 1;
        }
        if pos < chunk.len() {
            self.carry_start = base + pos as u64;
            self.extend_carry(&chunk[pos..]);
        }
    }

    /// Hands back the waiting last line as it is (a `\r` at its end is kept,
    /// since no newline came), ending at [`Splitter::offset`]. Returns
    /// whether a line was waiting.
    pub fn flush(&mut self, mut emit: impl FnMut(&Line<'_>)) -> bool {
        if self.carry_len == 0 {
            return false;
        }
        emit(&Line {
            bytes: &self.carry,
            start: self.carry_start,
            end: self.next,
            cut_bytes: self.carry_len - self.carry.len() as u64,
        });
        self.clear_carry();
        true
    }

    fn extend_carry(&mut self, bytes: &[u8]) {
        let Some(&last) = bytes.last() else {
            return;
        };
        let room = self.max_line_bytes - self.carry.len();
        self.carry
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.carry_len += bytes.len() as u64;
        self.carry_last = last;
    }

    fn emit_carry(&mut self, end: u64, emit: &mut impl FnMut(&Line<'_>)) {
        let content_len = self.carry_len - u64::from(self.carry_last == b'\r');
        if (self.carry.len() as u64) > content_len {
            self.carry.truncate(content_len as usize);
        }
        emit(&Line {
            bytes: &self.carry,
            start: self.carry_start,
            end,
            cut_bytes: content_len - self.carry.len() as u64,
        });
        self.clear_carry();
    }

    fn clear_carry(&mut self) {
        self.carry.clear();
        self.carry_len = 0;
        // A buffer grown for one huge line is not kept for the file's life.
        if self.carry.capacity() > 64 * 1024 {
            self.carry.shrink_to(64 * 1024);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, PartialEq, Eq)]
    struct Owned {
        bytes: Vec<u8>,
        start: u64,
        end: u64,
        cut: u64,
    }

    fn collect(splitter: &mut Splitter, chunks: &[&[u8]]) -> Vec<Owned> {
        let mut out = Vec::new();
        for chunk in chunks {
            splitter.push(chunk, |l| out.push(own(l)));
        }
        out
    }

    fn own(l: &Line<'_>) -> Owned {
        Owned {
            bytes: l.bytes.to_vec(),
            start: l.start,
            end: l.end,
            cut: l.cut_bytes,
        }
    }

    /// The reference: split the whole input at once, naively.
    fn naive(input: &[u8], offset: u64, max: usize) -> (Vec<Owned>, Option<Owned>) {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, &b) in input.iter().enumerate() {
            if b == b'\n' {
                let mut line = &input[start..i];
                if line.last() == Some(&b'\r') {
                    line = &line[..line.len() - 1];
                }
                let kept = line.len().min(max);
                out.push(Owned {
                    bytes: line[..kept].to_vec(),
                    start: offset + start as u64,
                    end: offset + i as u64 + 1,
                    cut: (line.len() - kept) as u64,
                });
                start = i + 1;
            }
        }
        let rest = &input[start..];
        let waiting = (!rest.is_empty()).then(|| Owned {
            bytes: rest[..rest.len().min(max)].to_vec(),
            start: offset + start as u64,
            end: offset + input.len() as u64,
            cut: rest.len().saturating_sub(max) as u64,
        });
        (out, waiting)
    }

    #[test]
    fn lines_carry_offsets_and_lose_their_line_endings() {
        let mut s = Splitter::new(100, 1024);
        let lines = collect(&mut s, &[b"one\ntwo\r\n\nthree"]);
        assert_eq!(
            lines,
            vec![
                Owned {
                    bytes: b"one".to_vec(),
                    start: 100,
                    end: 104,
                    cut: 0
                },
                Owned {
                    bytes: b"two".to_vec(),
                    start: 104,
                    end: 109,
                    cut: 0
                },
                Owned {
                    bytes: b"".to_vec(),
                    start: 109,
                    end: 110,
                    cut: 0
                },
            ]
        );
        assert_eq!(s.waiting(), Some(110));
        assert_eq!(s.offset(), 115);
    }

    #[test]
    fn a_partial_line_waits_for_its_newline() {
        let mut s = Splitter::new(0, 1024);
        assert!(collect(&mut s, &[b"hel", b"lo wo"]).is_empty());
        let lines = collect(&mut s, &[b"rld\r\nnext"]);
        assert_eq!(
            lines,
            vec![Owned {
                bytes: b"hello world".to_vec(),
                start: 0,
                end: 13,
                cut: 0
            }]
        );
        assert_eq!(s.waiting(), Some(13));
    }

    #[test]
    fn a_long_line_is_cut_and_the_rest_counted() {
        let mut s = Splitter::new(0, 4);
        let lines = collect(&mut s, &[b"abcdefgh\nab", b"cdefg", b"hij\r\nxyz\r\n"]);
        assert_eq!(
            lines,
            vec![
                Owned {
                    bytes: b"abcd".to_vec(),
                    start: 0,
                    end: 9,
                    cut: 4
                },
                Owned {
                    bytes: b"abcd".to_vec(),
                    start: 9,
                    end: 21,
                    cut: 6
                },
                Owned {
                    bytes: b"xyz".to_vec(),
                    start: 21,
                    end: 26,
                    cut: 0
                },
            ]
        );
        // The waiting line never holds more than max_line_bytes.
        collect(&mut s, &[&[b'x'; 10_000]]);
        assert_eq!(s.carry.len(), 4);
    }

    #[test]
    fn a_line_of_exactly_max_bytes_before_crlf_is_not_cut() {
        let mut s = Splitter::new(0, 3);
        let lines = collect(&mut s, &[b"abc", b"\r", b"\n"]);
        assert_eq!(
            lines,
            vec![Owned {
                bytes: b"abc".to_vec(),
                start: 0,
                end: 5,
                cut: 0
            }]
        );
    }

    #[test]
    fn flush_hands_back_the_waiting_line_as_it_is() {
        let mut s = Splitter::new(10, 1024);
        collect(&mut s, &[b"a\nno newline\r"]);
        let mut out = Vec::new();
        assert!(s.flush(|l| out.push(own(l))));
        assert_eq!(
            out,
            vec![Owned {
                bytes: b"no newline\r".to_vec(),
                start: 12,
                end: 23,
                cut: 0
            }]
        );
        assert!(!s.flush(|_| panic!("nothing waits")));
        assert_eq!(s.waiting(), None);
    }

    #[test]
    fn reset_forgets_the_waiting_line() {
        let mut s = Splitter::new(0, 1024);
        collect(&mut s, &[b"old partial"]);
        s.reset(0);
        let lines = collect(&mut s, &[b"new\n"]);
        assert_eq!(
            lines,
            vec![Owned {
                bytes: b"new".to_vec(),
                start: 0,
                end: 4,
                cut: 0
            }]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn any_chunking_gives_the_lines_of_a_naive_split(
            input in proptest::collection::vec(
                prop_oneof![Just(b'a'), Just(b'b'), Just(b'\r'), Just(b'\n')], 0..200),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
            max in 1usize..12,
            offset in 0u64..1000,
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
            points.push(0);
            points.push(input.len());
            points.sort_unstable();
            let chunks: Vec<&[u8]> = points.windows(2).map(|w| &input[w[0]..w[1]]).collect();

            let mut s = Splitter::new(offset, max);
            let lines = collect(&mut s, &chunks);
            let mut waiting = None;
            s.flush(|l| waiting = Some(own(l)));

            let (expected, expected_waiting) = naive(&input, offset, max);
            prop_assert_eq!(lines, expected);
            prop_assert_eq!(waiting, expected_waiting);
            prop_assert_eq!(s.offset(), offset + input.len() as u64);
        }
    }
}
