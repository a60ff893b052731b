//! The otlp_http sink's log encoder: a batch's records as OTLP/HTTP logs.

use sonde_encode::Half;
use sonde_log_sources::{LogLine, SourceInfo};
use sonde_logs::container;

use crate::logs::deliver::LogEncoder;

/// A container record's path fields and the names OpenTelemetry's
/// semantic conventions give them.
pub const OTEL_NAMES: [(&str, &str); 5] = [
    ("namespace", "k8s.namespace.name"),
    ("pod_name", "k8s.pod.name"),
    ("pod_uid", "k8s.pod.uid"),
    ("container_name", "k8s.container.name"),
    ("container_id", "container.id"),
];

/// OTLP/HTTP logs ([`sonde_encode::otlp_logs`]): the resource is the
/// host (`host.name`), the source (`sonde.source`) and the source's
/// fields; every record of a request is observed at the time the request
/// began. A container record's time is its `time_unix_nano`, and its
/// stream and pod are attributes by OpenTelemetry's names
/// ([`OTEL_NAMES`]).
#[derive(Debug, Default)]
pub struct OtlpLogs {
    enc: sonde_encode::otlp_logs::OtlpLogs,
    observed: u64,
}

impl LogEncoder for OtlpLogs {
    fn content_type(&self) -> &'static str {
        "application/x-protobuf"
    }

    fn begin(&mut self, source: &SourceInfo) {
        let resource = [
            ("host.name", source.host.as_str()),
            ("sonde.source", source.name.as_str()),
        ];
        let fields = source.fields.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        self.enc.begin(resource.into_iter().chain(fields));
        self.observed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    fn push(&mut self, _: &SourceInfo, line: &LogLine<'_>) {
        let mut attributes = [("", ""); 1 + OTEL_NAMES.len()];
        let mut n = 0;
        let mut time_unix_nano = 0;
        if let Some(c) = &line.container {
            time_unix_nano = container::unix_nanos(c.time).unwrap_or(0);
            let stream = c.stream.map(|s| ("log.iostream", s.as_str()));
            let pod = c.path_fields.iter().filter_map(|(k, v)| {
                let name = OTEL_NAMES.iter().find(|(ours, _)| ours == k)?.1;
                Some((name, &**v))
            });
            for (slot, kv) in attributes.iter_mut().zip(stream.into_iter().chain(pod)) {
                *slot = kv;
                n += 1;
            }
        }
        self.enc.push(&sonde_encode::otlp_logs::LogRecordIn {
            body: line.bytes,
            path: line.path,
            offset: line.offset,
            observed_unix_nano: self.observed,
            time_unix_nano,
            attributes: &attributes[..n],
            meta: line.meta,
        });
    }

    fn records(&self) -> usize {
        self.enc.records()
    }

    fn bytes(&self) -> usize {
        self.enc.bytes()
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.enc.finish(out);
    }

    fn split(body: &[u8]) -> Option<[Half; 2]> {
        sonde_encode::otlp_logs::OtlpLogs::split(body)
    }
}
