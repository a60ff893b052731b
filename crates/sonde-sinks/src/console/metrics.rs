//! The console sink's metric side: a window's points as human-readable lines

use std::io::{self, Write};

use sonde_aggregate::Batch;

use crate::sink::Sink;

/// Prints every point as `TIME NAME{TAGS} VALUE`.
#[derive(Debug, Default)]
pub struct Console {
    buf: Vec<u8>,
}

impl Sink for Console {
    fn write(&mut self, batch: &Batch) -> io::Result<()> {
        let mut out = io::stdout().lock();
        // Chunks keep the buffer small however many points a window has.
        let mut points = batch.points().peekable();
        while points.peek().is_some() {
            self.buf.clear();
            sonde_encode::console::encode(
                points.by_ref().take(crate::sink::ENCODE_CHUNK),
                &mut self.buf,
            );
            out.write_all(&self.buf)?;
        }
        out.flush()
    }
}
