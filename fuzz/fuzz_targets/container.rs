//! Container log lines (CRI and docker json-file) on arbitrary bytes,
//! joined with a small record limit: nothing panics; every byte of a line
//! that parses as a piece, or every line that does not, comes out in a
//! record exactly once (bounded by the limit, the rest counted as cut);
//! the checkpoints records carry never go back nor pass what was pushed;
//! and a flush leaves nothing behind.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use sonde_logs::container::{Format, Joiner, Record};
use sonde_logs::tailer::Counters;
use sonde_logs::Line;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let format = if pick & 1 == 0 { Format::Cri } else { Format::DockerJson };
    let max = 1 + usize::from(pick >> 1);
    let mut joiner = Joiner::default();
    let mut counters = Counters::default();
    let last_end = std::cell::Cell::new(0u64);
    let mut got = 0u64;
    // Bytes out: of records joined from pieces (kept and cut), and of
    // lines that did not parse.
    let (mut pieces_out, mut raw_out) = (0u64, 0u64);
    let mut emit = |r: &Record<'_>| {
        if !r.hold {
            assert!(r.line.end >= last_end.get(), "a checkpoint went back");
            last_end.set(r.line.end);
        }
        if r.stream.is_some() {
            assert!(r.line.bytes.len() <= max, "a record past its limit");
            pieces_out += r.line.bytes.len() as u64 + r.line.cut_bytes;
        } else {
            raw_out += r.line.bytes.len() as u64;
        }
        got += 1;
    };
    let (mut pieces_in, mut raw_in) = (0u64, 0u64);
    let mut at = 0u64;
    let mut lines = 0u64;
    for l in text.split(|&b| b == b'\n') {
        let line = Line {
            bytes: l,
            start: at,
            end: at + l.len() as u64 + 1,
            cut_bytes: 0,
        };
        at = line.end;
        lines += 1;
        match format.parse(l) {
            Some(p) => pieces_in += p.message.len() as u64,
            None => raw_in += l.len() as u64,
        }
        joiner.push(format, &line, (max, Instant::now()), &mut counters, &mut emit);
        assert!(last_end.get() <= at, "a checkpoint past the lines pushed");
    }
    joiner.flush(at, &mut counters, &mut emit);
    assert!(joiner.is_empty() && joiner.start().is_none());
    assert_eq!(last_end.get(), at, "the last checkpoint is not the end");
    assert!(got <= lines && got >= counters.malformed_lines);
    assert_eq!((pieces_out, raw_out), (pieces_in, raw_in), "bytes lost or repeated");
});
