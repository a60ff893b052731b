//! OTLP profiles export: a [`Profile`] as an `ExportProfilesServiceRequest`
//! of OpenTelemetry's `v1development` profiles protocol (what the
//! Collector's OTLP receiver takes on `/v1development/profiles` with its
//! `service.profilesSupport` feature gate, and what Pyroscope and Elastic
//! read behind it).
//!
//! What a [`Profile`] holds maps onto OTLP as follows:
//!
//! - one `ResourceProfiles` per host, its resource `host.name`, with one
//!   `ScopeProfiles` (scope `sonde`) holding one `Profile`: sample type
//!   `samples`/`count`, period type `cpu`/`nanoseconds` with the period
//!   one sample stands for (`1e9 / frequency`), the period's start and
//!   length;
//! - every [`Stack`](crate::model::Stack) becomes one `Sample` whose value
//!   is its count, pointing at a `Stack` of the shared dictionary (equal
//!   frame lists share one) and carrying the attributes of its process and
//!   thread as the semantic conventions name them: `process.pid`,
//!   `process.executable.name`, `thread.id`, `thread.name`, and
//!   `container.id` and `k8s.pod.uid` when the process runs in one;
//! - every [`Function`](crate::model::Function) becomes one `Function` (its name) and one
//!   `Location` with a single `Line` calling it, in the `Mapping` of its
//!   module (one per distinct module), so a location is fixed by its
//!   function, as in [`crate::pprof`];
//! - the dictionary's tables start with the zero entry the protocol
//!   reserves at index 0 (the empty string, a zero mapping, ...).
//!
//! A stack's locations are listed leaf first, as the protocol asks (the
//! model keeps them root first).

use std::collections::HashMap;

use prost::Message;

use crate::model::{Process, Profile};

/// The messages of `opentelemetry/proto/profiles/v1development` and of the
/// collector service that carries them, with the field numbers the
/// Collector's `pdata` v1.56 reads (the protocol is still in development,
/// so these are pinned to that release and checked against it by
/// `crates/sonde/tests/real_backends.rs`).
pub mod proto {
    /// `ExportProfilesServiceRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportProfilesServiceRequest {
        /// Per resource (here, per host).
        #[prost(message, repeated, tag = "1")]
        pub resource_profiles: Vec<ResourceProfiles>,
        /// The tables every profile of the request points into.
        #[prost(message, optional, tag = "2")]
        pub dictionary: Option<ProfilesDictionary>,
    }

    /// `ProfilesDictionary`: every table's index 0 is its zero entry.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProfilesDictionary {
        /// Modules.
        #[prost(message, repeated, tag = "1")]
        pub mapping_table: Vec<Mapping>,
        /// Code locations.
        #[prost(message, repeated, tag = "2")]
        pub location_table: Vec<Location>,
        /// Functions.
        #[prost(message, repeated, tag = "3")]
        pub function_table: Vec<Function>,
        /// Trace links (none here beyond the zero entry).
        #[prost(message, repeated, tag = "4")]
        pub link_table: Vec<Link>,
        /// Every string the other tables name by index.
        #[prost(string, repeated, tag = "5")]
        pub string_table: Vec<String>,
        /// Attributes the samples name by index.
        #[prost(message, repeated, tag = "6")]
        pub attribute_table: Vec<KeyValueAndUnit>,
        /// Distinct stacks.
        #[prost(message, repeated, tag = "7")]
        pub stack_table: Vec<Stack>,
    }

    /// `ResourceProfiles`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceProfiles {
        /// The resource (the host).
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        /// Per instrumentation scope.
        #[prost(message, repeated, tag = "2")]
        pub scope_profiles: Vec<ScopeProfiles>,
        /// The semantic conventions' schema.
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    /// `opentelemetry.proto.resource.v1.Resource`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        /// Its attributes.
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    /// `ScopeProfiles`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeProfiles {
        /// Who produced them.
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        /// The profiles.
        #[prost(message, repeated, tag = "2")]
        pub profiles: Vec<Profile>,
        /// The semantic conventions' schema.
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    /// `opentelemetry.proto.common.v1.InstrumentationScope`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        /// Its name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Its version.
        #[prost(string, tag = "2")]
        pub version: String,
    }

    /// `Profile`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each sample's value counts.
        #[prost(message, optional, tag = "1")]
        pub sample_type: Option<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        /// When the period started.
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        /// How long it lasted.
        #[prost(uint64, tag = "4")]
        pub duration_nano: u64,
        /// What the period is of.
        #[prost(message, optional, tag = "5")]
        pub period_type: Option<ValueType>,
        /// What one sample stands for, in `period_type`'s unit.
        #[prost(int64, tag = "6")]
        pub period: i64,
        /// A random id of 16 bytes.
        #[prost(bytes = "vec", tag = "7")]
        pub profile_id: Vec<u8>,
    }

    /// `ValueType`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// The type's name.
        #[prost(int32, tag = "1")]
        pub type_strindex: i32,
        /// Its unit.
        #[prost(int32, tag = "2")]
        pub unit_strindex: i32,
    }

    /// `Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Its stack in the dictionary.
        #[prost(int32, tag = "1")]
        pub stack_index: i32,
        /// Its attributes in the dictionary.
        #[prost(int32, repeated, tag = "2")]
        pub attribute_indices: Vec<i32>,
        /// A trace link (0, none).
        #[prost(int32, tag = "3")]
        pub link_index: i32,
        /// One value per sample type.
        #[prost(int64, repeated, tag = "4")]
        pub values: Vec<i64>,
    }

    /// `Stack`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Stack {
        /// Locations, leaf first.
        #[prost(int32, repeated, tag = "1")]
        pub location_indices: Vec<i32>,
    }

    /// `Location`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Its module.
        #[prost(int32, tag = "1")]
        pub mapping_index: i32,
        /// The instruction's address (0: symbolised already).
        #[prost(uint64, tag = "2")]
        pub address: u64,
        /// The functions at it, inlined ones first.
        #[prost(message, repeated, tag = "3")]
        pub lines: Vec<Line>,
    }

    /// `Line`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// The function.
        #[prost(int32, tag = "1")]
        pub function_index: i32,
        /// Its source line (0, unknown).
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    /// `Function`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Its (demangled) name.
        #[prost(int32, tag = "1")]
        pub name_strindex: i32,
        /// Its name in the binary.
        #[prost(int32, tag = "2")]
        pub system_name_strindex: i32,
        /// Its source file.
        #[prost(int32, tag = "3")]
        pub filename_strindex: i32,
    }

    /// `Mapping`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Where it was loaded (0, unknown).
        #[prost(uint64, tag = "1")]
        pub memory_start: u64,
        /// Where it ends (0, unknown).
        #[prost(uint64, tag = "2")]
        pub memory_limit: u64,
        /// The file's offset it was loaded from.
        #[prost(uint64, tag = "3")]
        pub file_offset: u64,
        /// The module's file.
        #[prost(int32, tag = "4")]
        pub filename_strindex: i32,
    }

    /// `Link`: a trace and span id.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        /// The trace id.
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        /// The span id.
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
    }

    /// `KeyValueAndUnit`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValueAndUnit {
        /// The key.
        #[prost(int32, tag = "1")]
        pub key_strindex: i32,
        /// The value.
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
        /// The value's unit (0, none).
        #[prost(int32, tag = "3")]
        pub unit_strindex: i32,
    }

    /// `opentelemetry.proto.common.v1.KeyValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        /// The key.
        #[prost(string, tag = "1")]
        pub key: String,
        /// The value.
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    /// `opentelemetry.proto.common.v1.AnyValue`, the two kinds used here.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        /// The value.
        #[prost(oneof = "Value", tags = "1, 3")]
        pub value: Option<Value>,
    }

    /// `AnyValue.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// `string_value`.
        #[prost(string, tag = "1")]
        String(String),
        /// `int_value`.
        #[prost(int64, tag = "3")]
        Int(i64),
    }
}

/// The semantic conventions' schema the attributes follow.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";

/// An attribute's value before it is interned.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Value {
    String(String),
    Int(i64),
}

impl Value {
    fn any(&self) -> proto::AnyValue {
        proto::AnyValue {
            value: Some(match self {
                Value::String(s) => proto::Value::String(s.clone()),
                Value::Int(i) => proto::Value::Int(*i),
            }),
        }
    }
}

/// The dictionary being filled: each table with the index of every entry
/// already in it.
struct Dictionary {
    out: proto::ProfilesDictionary,
    strings: HashMap<String, i32>,
    attributes: HashMap<(&'static str, Value), i32>,
    stacks: HashMap<Vec<i32>, i32>,
    mappings: HashMap<String, i32>,
}

impl Dictionary {
    fn new() -> Dictionary {
        let mut d = Dictionary {
            out: proto::ProfilesDictionary {
                mapping_table: vec![proto::Mapping::default()],
                location_table: vec![proto::Location::default()],
                function_table: vec![proto::Function::default()],
                link_table: vec![proto::Link::default()],
                string_table: Vec::new(),
                attribute_table: vec![proto::KeyValueAndUnit::default()],
                stack_table: vec![proto::Stack::default()],
            },
            strings: HashMap::new(),
            attributes: HashMap::new(),
            stacks: HashMap::new(),
            mappings: HashMap::new(),
        };
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = index(self.out.string_table.len());
        self.out.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &'static str, value: Value) -> i32 {
        if let Some(&i) = self.attributes.get(&(key, value.clone())) {
            return i;
        }
        let entry = proto::KeyValueAndUnit {
            key_strindex: self.string(key),
            value: Some(value.any()),
            unit_strindex: 0,
        };
        let i = index(self.out.attribute_table.len());
        self.out.attribute_table.push(entry);
        self.attributes.insert((key, value), i);
        i
    }

    fn mapping(&mut self, module: &str) -> i32 {
        if module.is_empty() {
            return 0;
        }
        if let Some(&i) = self.mappings.get(module) {
            return i;
        }
        let mapping = proto::Mapping {
            filename_strindex: self.string(module),
            ..proto::Mapping::default()
        };
        let i = index(self.out.mapping_table.len());
        self.out.mapping_table.push(mapping);
        self.mappings.insert(module.to_string(), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = index(self.out.stack_table.len());
        self.out.stack_table.push(proto::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    /// The attributes of a sample of `p`, as indices.
    fn process(&mut self, p: &Process) -> Vec<i32> {
        let mut out = vec![
            self.attribute("process.pid", Value::Int(i64::from(p.pid))),
            self.attribute("process.executable.name", Value::String(p.name.clone())),
        ];
        if p.tid != 0 {
            out.push(self.attribute("thread.id", Value::Int(i64::from(p.tid))));
        }
        for (key, value) in [
            ("thread.name", &p.thread),
            ("container.id", &p.container),
            ("k8s.pod.uid", &p.pod),
        ] {
            if !value.is_empty() {
                out.push(self.attribute(key, Value::String(value.clone())));
            }
        }
        out
    }
}

/// A table's length as the protocol's `int32` index.
fn index(len: usize) -> i32 {
    i32::try_from(len).expect("an OTLP profile's table holds at most 2^31 entries")
}

/// `profile` as an OTLP profiles request: one resource per host named in
/// its processes (`default_host` for processes that name none), produced
/// by `scope_version` of sonde.
pub fn encode(profile: &Profile, default_host: &str, scope_version: &str) -> Vec<u8> {
    request(profile, default_host, scope_version).encode_to_vec()
}

/// The request [`encode`] writes.
pub fn request(
    profile: &Profile,
    default_host: &str,
    scope_version: &str,
) -> proto::ExportProfilesServiceRequest {
    let mut d = Dictionary::new();
    // One location and function per model function, in its module.
    let locations: Vec<i32> = profile
        .functions
        .iter()
        .map(|f| {
            let name = d.string(&f.name);
            let function = index(d.out.function_table.len());
            d.out.function_table.push(proto::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: 0,
            });
            let mapping_index = d.mapping(&f.module);
            let location = index(d.out.location_table.len());
            d.out.location_table.push(proto::Location {
                mapping_index,
                address: 0,
                lines: vec![proto::Line {
                    function_index: function,
                    line: 0,
                }],
            });
            location
        })
        .collect();
    let attributes: Vec<Vec<i32>> = profile.processes.iter().map(|p| d.process(p)).collect();
    let sample_type = proto::ValueType {
        type_strindex: d.string("samples"),
        unit_strindex: d.string("count"),
    };
    let period_type = proto::ValueType {
        type_strindex: d.string("cpu"),
        unit_strindex: d.string("nanoseconds"),
    };
    let period = if profile.frequency == 0 {
        0
    } else {
        1_000_000_000 / i64::from(profile.frequency)
    };
    // Hosts in the order they first appear.
    let mut hosts: Vec<(&str, Vec<proto::Sample>)> = Vec::new();
    for stack in &profile.stacks {
        let process = &profile.processes[stack.process as usize];
        let host = if process.host.is_empty() {
            default_host
        } else {
            process.host.as_str()
        };
        let leaf_first: Vec<i32> = stack
            .frames
            .iter()
            .rev()
            .map(|&f| locations[f as usize])
            .collect();
        let sample = proto::Sample {
            stack_index: d.stack(leaf_first),
            attribute_indices: attributes[stack.process as usize].clone(),
            link_index: 0,
            values: vec![i64::try_from(stack.count).unwrap_or(i64::MAX)],
        };
        match hosts.iter_mut().find(|(h, _)| *h == host) {
            Some((_, samples)) => samples.push(sample),
            None => hosts.push((host, vec![sample])),
        }
    }
    let resource_profiles = hosts
        .into_iter()
        .map(|(host, samples)| proto::ResourceProfiles {
            resource: Some(proto::Resource {
                attributes: vec![proto::KeyValue {
                    key: "host.name".into(),
                    value: Some(Value::String(host.to_string()).any()),
                }],
            }),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: Some(proto::InstrumentationScope {
                    name: "sonde".into(),
                    version: scope_version.into(),
                }),
                profiles: vec![proto::Profile {
                    sample_type: Some(sample_type.clone()),
                    samples,
                    time_unix_nano: profile.start_ns,
                    duration_nano: profile.duration_ns,
                    period_type: Some(period_type.clone()),
                    period,
                    profile_id: profile_id(profile.start_ns, host),
                }],
                schema_url: SCHEMA_URL.into(),
            }],
            schema_url: SCHEMA_URL.into(),
        })
        .collect();
    proto::ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(d.out),
    }
}

/// A profile's 16-byte id, fixed by its host and period so that a profile
/// sent again carries the same id (a backend may drop the second).
fn profile_id(start_ns: u64, host: &str) -> Vec<u8> {
    use std::hash::{BuildHasher, Hasher};
    let mut id = Vec::with_capacity(16);
    for seed in [0x736f_6e64_6501_u64, 0x736f_6e64_6502] {
        let mut h = foldhash::fast::FixedState::with_seed(seed).build_hasher();
        h.write_u64(start_ns);
        h.write(host.as_bytes());
        id.extend_from_slice(&h.finish().to_le_bytes());
    }
    id
}

/// What a request holds, read back: per host, the samples of each
/// (process name, thread name, function names leaf first) with their
/// counts. For tests and for checking what another producer sent.
///
/// # Errors
///
/// The bytes are not a request, or an index points outside its table.
pub fn decode_samples(bytes: &[u8]) -> Result<Vec<DecodedSample>, String> {
    let req = proto::ExportProfilesServiceRequest::decode(bytes).map_err(|e| e.to_string())?;
    let d = req.dictionary.unwrap_or_default();
    let s = |i: i32| -> Result<String, String> {
        d.string_table
            .get(usize::try_from(i).map_err(|_| format!("string index {i}"))?)
            .cloned()
            .ok_or_else(|| format!("string index {i} past the table"))
    };
    let at = |i: i32, len: usize, what: &str| -> Result<usize, String> {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < len)
            .ok_or_else(|| format!("{what} index {i} past the table of {len}"))
    };
    let mut out = Vec::new();
    for rp in &req.resource_profiles {
        let host = rp
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "host.name"))
            .and_then(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(proto::Value::String(h)) => Some(h.clone()),
                    _ => None,
                },
            )
            .unwrap_or_default();
        for sp in &rp.scope_profiles {
            for p in &sp.profiles {
                for sample in &p.samples {
                    let stack =
                        &d.stack_table[at(sample.stack_index, d.stack_table.len(), "stack")?];
                    let mut frames = Vec::new();
                    for &l in &stack.location_indices {
                        let loc = &d.location_table[at(l, d.location_table.len(), "location")?];
                        for line in &loc.lines {
                            let f = &d.function_table
                                [at(line.function_index, d.function_table.len(), "function")?];
                            frames.push(s(f.name_strindex)?);
                        }
                    }
                    let mut attributes = Vec::new();
                    for &a in &sample.attribute_indices {
                        let kv = &d.attribute_table[at(a, d.attribute_table.len(), "attribute")?];
                        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(proto::Value::String(v)) => v.clone(),
                            Some(proto::Value::Int(i)) => i.to_string(),
                            None => String::new(),
                        };
                        attributes.push((s(kv.key_strindex)?, value));
                    }
                    out.push(DecodedSample {
                        host: host.clone(),
                        start_ns: p.time_unix_nano,
                        frames,
                        attributes,
                        count: sample.values.first().copied().unwrap_or(0),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// One sample of a request, read back by [`decode_samples`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedSample {
    /// The resource's `host.name`.
    pub host: String,
    /// When its profile's period started, Unix nanoseconds.
    pub start_ns: u64,
    /// Function names, leaf first.
    pub frames: Vec<String>,
    /// The sample's attributes, as written.
    pub attributes: Vec<(String, String)>,
    /// Its value.
    pub count: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, ProfileBuilder};

    fn f(name: &str, module: &str) -> Function {
        Function {
            name: name.into(),
            module: module.into(),
        }
    }

    fn process(pid: u32, tid: u32, thread: &str, host: &str) -> Process {
        Process {
            pid,
            name: "burner".into(),
            tid,
            thread: thread.into(),
            host: host.into(),
            container: if pid == 2 {
                "c0ffee".into()
            } else {
                String::new()
            },
            pod: if pid == 2 {
                "pod-uid-1".into()
            } else {
                String::new()
            },
        }
    }

    fn sample_profile() -> Profile {
        let mut b = ProfileBuilder::new(19, 1_700_000_000_000_000_000, 60_000_000_000);
        let main = f("main", "/usr/bin/burner");
        let work = f("work", "/usr/bin/burner");
        let memcpy = f("memcpy", "/lib/libc.so.6");
        let syscall = f("entry_SYSCALL_64", "[kernel]");
        b.add(&process(1, 11, "worker", "a"), [&main, &work, &memcpy], 5);
        b.add(&process(1, 12, "worker", "a"), [&main, &work, &memcpy], 3);
        b.add(&process(1, 11, "worker", "a"), [&main, &syscall], 2);
        b.add(&process(2, 21, "io", ""), [&main, &work], 7);
        b.finish()
    }

    #[test]
    fn every_stack_is_a_sample_with_its_count_leaf_first_and_its_attributes() {
        let p = sample_profile();
        let bytes = encode(&p, "default-host", "1.2.3");
        let mut got = decode_samples(&bytes).unwrap();
        got.sort_by(|a, b| (a.count, &a.frames).cmp(&(b.count, &b.frames)));
        let attrs = |pid: &str, tid: &str, thread: &str, extra: &[(&str, &str)]| {
            let mut v = vec![
                ("process.pid".to_string(), pid.to_string()),
                ("process.executable.name".into(), "burner".into()),
                ("thread.id".into(), tid.into()),
                ("thread.name".into(), thread.into()),
            ];
            v.extend(
                extra
                    .iter()
                    .map(|(k, x)| ((*k).to_string(), (*x).to_string())),
            );
            v
        };
        let frames = |f: &[&str]| f.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                DecodedSample {
                    host: "a".into(),
                    start_ns: 1_700_000_000_000_000_000,
                    frames: frames(&["entry_SYSCALL_64", "main"]),
                    attributes: attrs("1", "11", "worker", &[]),
                    count: 2,
                },
                DecodedSample {
                    host: "a".into(),
                    start_ns: 1_700_000_000_000_000_000,
                    frames: frames(&["memcpy", "work", "main"]),
                    attributes: attrs("1", "12", "worker", &[]),
                    count: 3,
                },
                DecodedSample {
                    host: "a".into(),
                    start_ns: 1_700_000_000_000_000_000,
                    frames: frames(&["memcpy", "work", "main"]),
                    attributes: attrs("1", "11", "worker", &[]),
                    count: 5,
                },
                DecodedSample {
                    host: "default-host".into(),
                    start_ns: 1_700_000_000_000_000_000,
                    frames: frames(&["work", "main"]),
                    attributes: attrs(
                        "2",
                        "21",
                        "io",
                        &[("container.id", "c0ffee"), ("k8s.pod.uid", "pod-uid-1")]
                    ),
                    count: 7,
                },
            ]
        );
    }

    #[test]
    fn the_dictionary_holds_each_thing_once_after_its_zero_entry() {
        let p = sample_profile();
        let req = request(&p, "h", "1");
        let d = req.dictionary.as_ref().unwrap();
        assert_eq!(d.string_table[0], "");
        assert_eq!(d.mapping_table[0], proto::Mapping::default());
        assert_eq!(d.stack_table[0], proto::Stack::default());
        assert_eq!(d.attribute_table[0], proto::KeyValueAndUnit::default());
        // Two threads on the same stack share its entry: 3 distinct stacks.
        assert_eq!(d.stack_table.len(), 1 + 3);
        // The burner, libc and the kernel.
        assert_eq!(d.mapping_table.len(), 1 + 3);
        assert_eq!(d.function_table.len(), 1 + p.functions.len());
        let mut strings = d.string_table.clone();
        strings.sort();
        strings.dedup();
        assert_eq!(strings.len(), d.string_table.len(), "a string twice");
        // One resource per host, each with the period's facts.
        assert_eq!(req.resource_profiles.len(), 2);
        let profile = &req.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(profile.period, 1_000_000_000 / 19);
        assert_eq!(profile.time_unix_nano, p.start_ns);
        assert_eq!(profile.duration_nano, p.duration_ns);
        let s = |i: i32| d.string_table[i as usize].as_str();
        let st = profile.sample_type.as_ref().unwrap();
        assert_eq!(
            (s(st.type_strindex), s(st.unit_strindex)),
            ("samples", "count")
        );
        let pt = profile.period_type.as_ref().unwrap();
        assert_eq!(
            (s(pt.type_strindex), s(pt.unit_strindex)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(profile.profile_id.len(), 16);
        // Fixed by host and period: the same profile sent twice keeps it.
        assert_eq!(
            request(&p, "h", "1").resource_profiles[0].scope_profiles[0].profiles[0].profile_id,
            profile.profile_id
        );
        assert_ne!(
            req.resource_profiles[1].scope_profiles[0].profiles[0].profile_id,
            profile.profile_id
        );
    }

    #[test]
    fn an_empty_profile_is_a_request_without_resources() {
        let p = ProfileBuilder::new(19, 0, 0).finish();
        let got = decode_samples(&encode(&p, "h", "1")).unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn a_request_pointing_outside_its_tables_is_an_error_not_a_panic() {
        let mut req = request(&sample_profile(), "h", "1");
        req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index = 99;
        let e = decode_samples(&req.encode_to_vec()).unwrap_err();
        assert!(e.contains("stack index 99"), "{e}");
        assert!(decode_samples(b"\xff\xff").is_err());
    }
}
