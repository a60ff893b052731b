//! The console sink: human-readable lines on standard output.

use std::io::{self, Write};

use sonde_aggregate::Batch;

use super::Sink;

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
            sonde_encode::console::encode(points.by_ref().take(super::ENCODE_CHUNK), &mut self.buf);
            out.write_all(&self.buf)?;
        }
        out.flush()
    }
}
