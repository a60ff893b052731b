//! The Prometheus exporter sink: renders each window to the text format and
//! keeps the latest for the admin crate's HTTP listener to serve.

use std::io;
use std::sync::{Arc, Mutex};

use sonde_aggregate::Batch;

use super::Sink;

/// The latest rendered window, shared with the HTTP server.
#[derive(Debug, Default, Clone)]
pub struct Exposition(Arc<Mutex<Arc<Vec<u8>>>>);

impl Exposition {
    /// The latest text (empty before the first window).
    pub fn get(&self) -> Arc<Vec<u8>> {
        self.0.lock().map(|g| Arc::clone(&g)).unwrap_or_default()
    }

    fn set(&self, text: Vec<u8>) {
        if let Ok(mut g) = self.0.lock() {
            *g = Arc::new(text);
        }
    }
}

/// Renders windows into an [`Exposition`].
#[derive(Debug)]
pub struct PrometheusExporter {
    exposition: Exposition,
}

impl PrometheusExporter {
    /// A sink writing into `exposition`.
    pub fn new(exposition: Exposition) -> Self {
        PrometheusExporter { exposition }
    }
}

impl Sink for PrometheusExporter {
    fn write(&mut self, batch: &Batch) -> io::Result<()> {
        let mut text = Vec::with_capacity(64 * batch.len());
        sonde_encode::prometheus::encode(batch.points(), &mut text);
        self.exposition.set(text);
        Ok(())
    }
}
