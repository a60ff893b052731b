//! The file sink's metric side: a window's points as JSON lines

use std::io::{self, Write};
use std::path::Path;

use sonde_aggregate::Batch;

use crate::sink::Sink;

/// Appends one JSON object per point per line (ARCHITECTURE.md's format).
#[derive(Debug)]
pub struct File {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl File {
    /// Opens (creating if needed) `path` for appending.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened.
    pub fn open(path: &Path) -> io::Result<File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(File {
            file,
            buf: Vec::new(),
        })
    }
}

impl Sink for File {
    fn write(&mut self, batch: &Batch) -> io::Result<()> {
        // Whole lines per write, in chunks so the buffer stays small however
        // many points a window has.
        let mut points = batch.points().peekable();
        while points.peek().is_some() {
            self.buf.clear();
            sonde_encode::json::encode(
                points.by_ref().take(crate::sink::ENCODE_CHUNK),
                &mut self.buf,
            );
            self.file.write_all(&self.buf)?;
        }
        Ok(())
    }

    fn close(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}
