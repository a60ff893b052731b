//! The profiler's periods as OTLP profiles requests
//! (`ExportProfilesServiceRequest` of the `v1development` protocol), which
//! [`sonde_profile::otlp`] builds.

use sonde_profile::Profile;

use crate::profiles::ProfileEncoder;

/// Encodes each period as one OTLP profiles request, its resource the
/// agent's host (`agent.hostname`).
#[derive(Debug)]
pub struct OtlpProfiles {
    host: String,
}

impl OtlpProfiles {
    /// Requests naming `host`.
    pub fn new(host: &str) -> Self {
        OtlpProfiles {
            host: host.to_string(),
        }
    }
}

impl ProfileEncoder for OtlpProfiles {
    fn encode(&mut self, profile: &Profile, out: &mut Vec<u8>) {
        let body = sonde_profile::otlp::encode(profile, &self.host, env!("CARGO_PKG_VERSION"));
        out.extend_from_slice(&body);
    }

    fn content_type(&self) -> &'static str {
        "application/x-protobuf"
    }
}
