//! pprof export and import: [`Profile`] to and from Google's
//! `profile.proto` (gzip-compressed protobuf), the format `go tool pprof`,
//! Pyroscope, Parca and most profilers read.
//!
//! What a [`Profile`] holds maps onto pprof as follows:
//!
//! - every [`Function`] becomes one pprof `Function` (name and system name
//!   the function's name, file name its module) and one `Location` with a
//!   single `Line` calling it, so the location id of a frame is fixed by
//!   its function;
//! - every distinct non-empty module becomes one `Mapping` with
//!   `has_functions` set, which tells pprof the locations are already
//!   symbolised (it would otherwise look for the binaries to symbolise
//!   addresses that are all 0 here);
//! - every [`Stack`](crate::model::Stack) becomes one `Sample` with
//!   values `[count, count * period]` for the sample types
//!   `samples/count` and `cpu/nanoseconds`, and the labels `pid`
//!   (numeric), `comm` (string) and, for a process in a container,
//!   `container` (its id) and, in a Kubernetes pod, `pod_uid`, for its
//!   process, `tid` (numeric) and `thread`
//!   (its name) for its thread, and `host` for where it was taken
//!   (`go tool pprof -tagfocus thread=worker` selects by them).
//!
//! Decoding goes the other way and also reads what other producers write:
//! inlined frames (a location with several lines), unsymbolised locations
//! (named by their offset into the module, as [`Function`] asks), counts
//! given only as CPU time, and no process labels at all.

use std::collections::HashMap;
use std::io::{Read, Write};

use prost::Message;

use crate::model::{Function, Process, Profile, ProfileBuilder};

/// The messages of `profile.proto` (package `perftools.profiles`) with the
/// published field numbers. Strings are indices into
/// [`Profile::string_table`](proto::Profile::string_table), ids are
/// nonzero.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
        #[prost(int64, tag = "15")]
        pub doc_url: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One per `Profile::sample_type`.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// 0 when the mapping is unknown.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Innermost first: `line[i + 1]` is the function `line[i]` was
        /// inlined into.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The most a pprof file may inflate to. A busy host's minute is a few
/// MiB; the cap keeps a gzip bomb from taking the agent's memory.
const MAX_INFLATED: u64 = 256 << 20;

/// The most frames a decoded sample may have. Real stacks stop far below
/// (perf's default limit is 127); the cap keeps a small file whose samples
/// repeat a location of many inlined lines from expanding without bound.
const MAX_FRAMES: usize = 1 << 16;

/// Errors reading a pprof file.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The bytes start like gzip but do not inflate (truncated or
    /// corrupt).
    #[error("corrupt gzip: {0}")]
    Gzip(std::io::Error),
    /// The (inflated) bytes are not a protobuf of the pprof schema.
    #[error("not gzip or protobuf: {0}")]
    Protobuf(prost::DecodeError),
    /// The file inflates to more than sonde reads.
    #[error("pprof inflates to over {limit} bytes")]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The protobuf parses but does not hold together: a dangling id, a
    /// string index out of range, a sample without the values its types
    /// ask for.
    #[error("invalid pprof: {reason}")]
    Invalid {
        /// What is wrong, for the log.
        reason: String,
    },
}

fn invalid(reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        reason: reason.into(),
    }
}

/// Encodes `profile` as a gzip-compressed pprof protobuf.
///
/// The output is a function of `profile` alone (everything is numbered in
/// order of appearance), so equal profiles give equal bytes.
pub fn encode(profile: &Profile) -> Vec<u8> {
    let raw = to_message(profile).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        flate2::Compression::default(),
    );
    gz.write_all(&raw)
        .and_then(|()| gz.finish())
        .expect("gzip into a Vec cannot fail")
}

/// Interns strings into a pprof string table, `""` at index 0 as the
/// format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.intern("");
        s
    }

    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }

    /// A string label `key = value`, none for an empty value (a label the
    /// producer had nothing for).
    fn label(&mut self, key: i64, value: &str) -> Option<proto::Label> {
        (!value.is_empty()).then(|| proto::Label {
            key,
            str: self.intern(value),
            ..Default::default()
        })
    }
}

/// The pprof message for `profile`, before compression.
fn to_message(profile: &Profile) -> proto::Profile {
    let mut strings = Strings::new();
    let samples = strings.intern("samples");
    let count_unit = strings.intern("count");
    let cpu = strings.intern("cpu");
    let nanoseconds = strings.intern("nanoseconds");
    let pid_key = strings.intern("pid");
    let comm_key = strings.intern("comm");
    let container_key = strings.intern("container");
    let pod_key = strings.intern("pod_uid");
    let tid_key = strings.intern("tid");
    let thread_key = strings.intern("thread");
    let host_key = strings.intern("host");
    let period = period_ns(profile.frequency);

    // Function i is pprof function and location i + 1: ids must be
    // nonzero, and one location per function is all a symbolised frame
    // needs.
    let mut mappings: Vec<proto::Mapping> = Vec::new();
    let mut mapping_of_module: HashMap<&str, u64> = HashMap::new();
    let mut functions = Vec::with_capacity(profile.functions.len());
    let mut locations = Vec::with_capacity(profile.functions.len());
    for (i, f) in profile.functions.iter().enumerate() {
        let id = i as u64 + 1;
        let name = strings.intern(&f.name);
        let module = strings.intern(&f.module);
        // No mapping for a frame without a module: mapping_id 0 is
        // pprof's "unknown", truer than a mapping named "".
        let mapping_id = if f.module.is_empty() {
            0
        } else {
            *mapping_of_module.entry(&f.module).or_insert_with(|| {
                let id = mappings.len() as u64 + 1;
                mappings.push(proto::Mapping {
                    id,
                    filename: module,
                    has_functions: true,
                    ..Default::default()
                });
                id
            })
        };
        functions.push(proto::Function {
            id,
            name,
            system_name: name,
            filename: module,
            start_line: 0,
        });
        locations.push(proto::Location {
            id,
            mapping_id,
            address: 0,
            line: vec![proto::Line {
                function_id: id,
                line: 0,
                column: 0,
            }],
            is_folded: false,
        });
    }

    let sample = profile
        .stacks
        .iter()
        .map(|stack| {
            let process = &profile.processes[stack.process as usize];
            let count = i64::try_from(stack.count).unwrap_or(i64::MAX);
            proto::Sample {
                // pprof lists the leaf first; a stack is root first.
                location_id: stack
                    .frames
                    .iter()
                    .rev()
                    .map(|&f| u64::from(f) + 1)
                    .collect(),
                value: vec![count, count.saturating_mul(period)],
                label: [
                    proto::Label {
                        key: pid_key,
                        num: i64::from(process.pid),
                        ..Default::default()
                    },
                    proto::Label {
                        key: comm_key,
                        str: strings.intern(&process.name),
                        ..Default::default()
                    },
                ]
                .into_iter()
                .chain(strings.label(container_key, &process.container))
                .chain(strings.label(pod_key, &process.pod))
                .chain((process.tid != 0).then(|| proto::Label {
                    key: tid_key,
                    num: i64::from(process.tid),
                    ..Default::default()
                }))
                .chain(strings.label(thread_key, &process.thread))
                .chain(strings.label(host_key, &process.host))
                .collect(),
            }
        })
        .collect();

    proto::Profile {
        sample_type: vec![
            proto::ValueType {
                r#type: samples,
                unit: count_unit,
            },
            proto::ValueType {
                r#type: cpu,
                unit: nanoseconds,
            },
        ],
        sample,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: i64::try_from(profile.start_ns).unwrap_or(i64::MAX),
        duration_nanos: i64::try_from(profile.duration_ns).unwrap_or(i64::MAX),
        period_type: Some(proto::ValueType {
            r#type: cpu,
            unit: nanoseconds,
        }),
        period,
        // default_sample_type stays unset: pprof then shows the last type,
        // CPU time, whose shares are the sample shares.
        ..Default::default()
    }
}

/// The CPU time one sample stands for at `frequency` Hz, in nanoseconds
/// (0 when the frequency is unknown).
fn period_ns(frequency: u32) -> i64 {
    if frequency == 0 {
        0
    } else {
        (1e9 / f64::from(frequency)).round() as i64
    }
}

/// Decodes a pprof file (gzip-compressed or not) into a Profile.
///
/// Any input gives a profile or an error, never a panic: every id and
/// string index is checked before it is followed.
pub fn decode(bytes: &[u8]) -> Result<Profile, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Invalid {
            reason: "the file is empty".into(),
        });
    }
    // A protobuf cannot start with 0x1f (field 3 with the invalid wire
    // type 7), so the gzip magic tells the two apart.
    let message = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .take(MAX_INFLATED + 1)
            .read_to_end(&mut raw)
            .map_err(DecodeError::Gzip)?;
        if raw.len() as u64 > MAX_INFLATED {
            return Err(DecodeError::TooLarge {
                limit: MAX_INFLATED,
            });
        }
        proto::Profile::decode(raw.as_slice()).map_err(DecodeError::Protobuf)?
    } else {
        proto::Profile::decode(bytes).map_err(DecodeError::Protobuf)?
    };
    from_message(&message)
}

/// The string table with checked look-ups.
struct Table<'a>(&'a [String]);

impl<'a> Table<'a> {
    fn get(&self, index: i64, what: &str) -> Result<&'a str, DecodeError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(String::as_str)
            .ok_or_else(|| {
                invalid(format!(
                    "{what} string index {index} out of range (table of {})",
                    self.0.len()
                ))
            })
    }
}

/// Indexes messages by their id, refusing 0 and duplicates (both make a
/// reference ambiguous).
fn by_id<'a, T>(
    items: &'a [T],
    id: impl Fn(&T) -> u64,
    what: &str,
) -> Result<HashMap<u64, &'a T>, DecodeError> {
    let mut out = HashMap::with_capacity(items.len());
    for item in items {
        let i = id(item);
        if i == 0 {
            return Err(invalid(format!("{what} with id 0")));
        }
        if out.insert(i, item).is_some() {
            return Err(invalid(format!("two {what}s with id {i}")));
        }
    }
    Ok(out)
}

/// How a sample's count is read from its values.
enum CountFrom {
    /// `value[i]` is the count.
    Value(usize),
    /// `value[i]` is CPU time: the count is it over the period.
    CpuTime(usize, u64),
}

fn from_message(m: &proto::Profile) -> Result<Profile, DecodeError> {
    let strings = Table(&m.string_table);
    if m.string_table.first().map(String::as_str) != Some("") {
        return Err(invalid("string_table[0] is not \"\""));
    }
    // Checked even where unused, so a file pprof would refuse is refused
    // here too.
    for (index, what) in [
        (m.drop_frames, "drop_frames"),
        (m.keep_frames, "keep_frames"),
        (m.default_sample_type, "default_sample_type"),
        (m.doc_url, "doc_url"),
    ] {
        strings.get(index, what)?;
    }
    for &c in &m.comment {
        strings.get(c, "comment")?;
    }
    let value_type = |v: &proto::ValueType| -> Result<(&str, &str), DecodeError> {
        Ok((
            strings.get(v.r#type, "sample type")?,
            strings.get(v.unit, "sample unit")?,
        ))
    };
    let sample_types = m
        .sample_type
        .iter()
        .map(value_type)
        .collect::<Result<Vec<_>, _>>()?;
    let period_type = m.period_type.as_ref().map(value_type).transpose()?;

    let mappings = by_id(&m.mapping, |x| x.id, "mapping")?;
    for x in &m.mapping {
        strings.get(x.filename, "mapping filename")?;
        strings.get(x.build_id, "mapping build id")?;
    }
    let functions = by_id(&m.function, |x| x.id, "function")?;
    for x in &m.function {
        strings.get(x.name, "function name")?;
        strings.get(x.system_name, "function system name")?;
        strings.get(x.filename, "function filename")?;
    }
    let mut location_index = HashMap::with_capacity(m.location.len());
    for (i, x) in m.location.iter().enumerate() {
        if x.id == 0 {
            return Err(invalid("location with id 0"));
        }
        if location_index.insert(x.id, i).is_some() {
            return Err(invalid(format!("two locations with id {}", x.id)));
        }
        if x.mapping_id != 0 && !mappings.contains_key(&x.mapping_id) {
            return Err(invalid(format!(
                "location {} refers to missing mapping {}",
                x.id, x.mapping_id
            )));
        }
        for line in &x.line {
            // Function id 0 is a line without a known function, which
            // pprof accepts; any other id must exist.
            if line.function_id != 0 && !functions.contains_key(&line.function_id) {
                return Err(invalid(format!(
                    "location {} refers to missing function {}",
                    x.id, line.function_id
                )));
            }
        }
    }

    let period = u64::try_from(m.period).unwrap_or(0);
    let count_from = if let Some(i) = sample_types.iter().position(|&(t, _)| t == "samples") {
        CountFrom::Value(i)
    } else if let Some(i) = sample_types
        .iter()
        .position(|&t| t == ("cpu", "nanoseconds"))
        .filter(|_| period > 0)
    {
        CountFrom::CpuTime(i, period)
    } else {
        CountFrom::Value(0)
    };
    if sample_types.is_empty() && !m.sample.is_empty() {
        return Err(invalid("samples without a sample_type"));
    }

    let frequency = match period_type {
        Some(("cpu", "nanoseconds")) if period > 0 => {
            // At most 1e9 (a period of 1 ns), so it fits a u32.
            (1e9 / period as f64).round() as u32
        }
        _ => 0,
    };
    let start_ns = u64::try_from(m.time_nanos).map_err(|_| invalid("negative time_nanos"))?;
    let duration_ns =
        u64::try_from(m.duration_nanos).map_err(|_| invalid("negative duration_nanos"))?;
    let mut out = ProfileBuilder::new(frequency, start_ns, duration_ns);

    // Each location's frames (interned in `out`, innermost first), made
    // when a sample first uses the location, so functions no sample
    // reaches stay out of the profile.
    let mut location_frames: Vec<Option<Vec<u32>>> = vec![None; m.location.len()];
    type Key<'s> = (u32, &'s str, &'s str, &'s str, u32, &'s str, &'s str);
    let mut process_of: HashMap<Key<'_>, u32> = HashMap::new();
    let mut frames = Vec::new();
    for sample in &m.sample {
        if sample.value.len() != sample_types.len() {
            return Err(invalid(format!(
                "a sample has {} values for {} sample types",
                sample.value.len(),
                sample_types.len()
            )));
        }
        let count = match count_from {
            CountFrom::Value(i) => sample.value[i],
            CountFrom::CpuTime(i, period) => match u64::try_from(sample.value[i]) {
                Ok(ns) => ((u128::from(ns) + u128::from(period / 2)) / u128::from(period)) as i64,
                Err(_) => -1,
            },
        };
        // Negative values come from diffs of profiles, which a Profile
        // cannot hold.
        let count = u64::try_from(count).map_err(|_| invalid("negative sample value"))?;

        let mut pid = 0u32;
        let mut tid = 0u32;
        let mut comm = "";
        let mut container = "";
        let mut pod = "";
        let mut thread = "";
        let mut host = "";
        for label in &sample.label {
            let key = strings.get(label.key, "label key")?;
            let value = strings.get(label.str, "label value")?;
            strings.get(label.num_unit, "label unit")?;
            match key {
                "pid" => pid = id_label(label, value, "pid")?,
                "tid" => tid = id_label(label, value, "tid")?,
                "comm" => comm = value,
                "container" => container = value,
                "pod_uid" => pod = value,
                "thread" => thread = value,
                "host" => host = value,
                _ => {}
            }
        }

        frames.clear();
        for id in &sample.location_id {
            let &i = location_index
                .get(id)
                .ok_or_else(|| invalid(format!("a sample refers to missing location {id}")))?;
            if location_frames[i].is_none() {
                let resolved = location_functions(&m.location[i], &strings, &mappings, &functions)?
                    .iter()
                    .map(|f| out.function(f))
                    .collect();
                location_frames[i] = Some(resolved);
            }
            // Both lists run leaf to root: locations leaf first, lines
            // innermost first.
            frames.extend(location_frames[i].iter().flatten());
            if frames.len() > MAX_FRAMES {
                return Err(invalid(format!("a sample of over {MAX_FRAMES} frames")));
            }
        }
        frames.reverse();
        if frames.is_empty() || count == 0 {
            // A Profile has no empty stacks (the builder would drop it
            // anyway, after interning its process for nothing).
            continue;
        }
        let key = (pid, comm, container, pod, tid, thread, host);
        let process = match process_of.get(&key) {
            Some(&p) => p,
            None => {
                let p = out.process(&Process {
                    pid,
                    name: comm.to_owned(),
                    container: container.to_owned(),
                    pod: pod.to_owned(),
                    tid,
                    thread: thread.to_owned(),
                    host: host.to_owned(),
                });
                process_of.insert(key, p);
                p
            }
        };
        out.add_interned(process, &frames, count);
    }
    Ok(out.finish())
}

/// A pid or tid label: numeric, or a string some producers write.
fn id_label(label: &proto::Label, value: &str, key: &str) -> Result<u32, DecodeError> {
    if label.str != 0 {
        value
            .parse()
            .map_err(|_| invalid(format!("{key} label {value:?} is not a {key}")))
    } else {
        u32::try_from(label.num)
            .map_err(|_| invalid(format!("{key} label {} is not a {key}", label.num)))
    }
}

/// The functions of a location, innermost first: one per line, or one
/// named by address when the location is not symbolised. References were
/// checked by the caller; a dangling one still gives an error here rather
/// than a panic.
fn location_functions(
    loc: &proto::Location,
    strings: &Table<'_>,
    mappings: &HashMap<u64, &proto::Mapping>,
    functions: &HashMap<u64, &proto::Function>,
) -> Result<Vec<Function>, DecodeError> {
    let mapping = match loc.mapping_id {
        0 => None,
        id => Some(
            *mappings
                .get(&id)
                .ok_or_else(|| invalid(format!("missing mapping {id}")))?,
        ),
    };
    let mapping_file = match mapping {
        Some(m) => strings.get(m.filename, "mapping filename")?,
        None => "",
    };
    // As the model names unsymbolised frames: the offset into the module's
    // file, which stays the same wherever the module was loaded.
    let by_address = || Function {
        name: format!(
            "0x{:x}",
            match mapping {
                Some(m) if loc.address >= m.memory_start =>
                    (loc.address - m.memory_start).wrapping_add(m.file_offset),
                _ => loc.address,
            }
        ),
        module: mapping_file.to_owned(),
    };
    if loc.line.is_empty() {
        return Ok(vec![by_address()]);
    }
    loc.line
        .iter()
        .map(|line| {
            if line.function_id == 0 {
                return Ok(by_address());
            }
            let f = functions
                .get(&line.function_id)
                .ok_or_else(|| invalid(format!("missing function {}", line.function_id)))?;
            let name = match strings.get(f.name, "function name")? {
                "" => strings.get(f.system_name, "function system name")?,
                name => name,
            };
            if name.is_empty() {
                return Ok(by_address());
            }
            let module = match strings.get(f.filename, "function filename")? {
                "" => mapping_file,
                file => file,
            };
            Ok(Function {
                name: name.to_owned(),
                module: module.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;
    use std::process::Command;

    fn f(name: &str, module: &str) -> Function {
        Function {
            name: name.into(),
            module: module.into(),
        }
    }

    fn p(pid: u32, name: &str) -> Process {
        Process {
            pid,
            name: name.into(),
            container: String::new(),
            ..Default::default()
        }
    }

    /// A stack as a comparable value: (pid, comm, container, pod, tid,
    /// thread, host), frames root first as (name, module), count.
    type Flat = (
        (u32, String, String, String, u32, String, String),
        Vec<(String, String)>,
        u64,
    );

    /// A profile's stacks as comparable values, sorted.
    fn stacks(profile: &Profile) -> Vec<Flat> {
        let mut out: Vec<_> = profile
            .stacks
            .iter()
            .map(|s| {
                let process = &profile.processes[s.process as usize];
                (
                    (
                        process.pid,
                        process.name.clone(),
                        process.container.clone(),
                        process.pod.clone(),
                        process.tid,
                        process.thread.clone(),
                        process.host.clone(),
                    ),
                    s.frames
                        .iter()
                        .map(|&i| {
                            let f = profile.function(i);
                            (f.name.clone(), f.module.clone())
                        })
                        .collect(),
                    s.count,
                )
            })
            .collect();
        out.sort();
        out
    }

    fn sample_profile() -> Profile {
        let mut b = ProfileBuilder::new(99, 1_700_000_000_123_456_789, 60_000_000_000);
        let mut nginx = p(4242, "nginx");
        (nginx.tid, nginx.thread, nginx.host) = (4243, "worker 1".into(), "web-1".into());
        let mut other = p(77, "рабочий-процесс");
        other.container = "ab".repeat(32);
        other.pod = "1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f".into();
        let main = f("main", "/usr/sbin/nginx");
        let work = f("ngx_process_events", "/usr/sbin/nginx");
        let sys = f("do_syscall_64", "[kernel]");
        let jp = f("日本::関数<T>", "/opt/lib/libü.so");
        let anon = f("0x1f2e3", "");
        b.add(&nginx, [&main, &work, &sys], 70);
        b.add(&nginx, [&main, &work], 5);
        b.add(&nginx, [&main, &jp, &anon], 3);
        // The same frames in another process stay a separate stack.
        b.add(&other, [&main, &work, &sys], 30);
        b.add(&other, [&jp], 1);
        b.finish()
    }

    #[test]
    fn a_profile_survives_encode_and_decode() {
        let profile = sample_profile();
        let bytes = encode(&profile);
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip on the wire");
        let back = decode(&bytes).unwrap();
        assert_eq!(stacks(&back), stacks(&profile));
        assert_eq!(back.frequency, 99);
        assert_eq!(back.start_ns, profile.start_ns);
        assert_eq!(back.duration_ns, profile.duration_ns);
        assert_eq!(back.samples(), profile.samples());
    }

    #[test]
    fn encoding_is_reproducible() {
        let profile = sample_profile();
        assert_eq!(encode(&profile), encode(&profile));
    }

    #[test]
    fn the_encoding_follows_pprof_conventions() {
        let profile = sample_profile();
        let m = to_message(&profile);
        let s = |i: i64| m.string_table[i as usize].as_str();
        assert_eq!(m.string_table[0], "");
        let types: Vec<_> = m
            .sample_type
            .iter()
            .map(|v| (s(v.r#type), s(v.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!(m.period, 10_101_010);
        let pt = m.period_type.as_ref().unwrap();
        assert_eq!((s(pt.r#type), s(pt.unit)), ("cpu", "nanoseconds"));
        assert_eq!(m.default_sample_type, 0);
        assert!(m.comment.is_empty());
        // One mapping per non-empty module, all symbolised.
        let mut modules: Vec<_> = m.mapping.iter().map(|x| s(x.filename)).collect();
        modules.sort();
        assert_eq!(modules, ["/opt/lib/libü.so", "/usr/sbin/nginx", "[kernel]"]);
        assert!(m.mapping.iter().all(|x| x.has_functions));
        // The leaf first, and the CPU time of each sample.
        let hot = m.sample.iter().find(|x| x.value[0] == 70).unwrap();
        let leaf = &m.location[hot.location_id[0] as usize - 1];
        let leaf_fn = &m.function[leaf.line[0].function_id as usize - 1];
        assert_eq!(s(leaf_fn.name), "do_syscall_64");
        assert_eq!(hot.value[1], 70 * 10_101_010);
        let labels: Vec<_> = hot
            .label
            .iter()
            .map(|l| (s(l.key), l.num, s(l.str)))
            .collect();
        assert_eq!(
            labels,
            [
                ("pid", 4242, ""),
                ("comm", 0, "nginx"),
                ("tid", 4243, ""),
                ("thread", 0, "worker 1"),
                ("host", 0, "web-1")
            ]
        );
        // A process in a container also carries its id.
        let in_container = m.sample.iter().find(|x| x.value[0] == 30).unwrap();
        let labels: Vec<_> = in_container
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str)))
            .collect();
        let id = "ab".repeat(32);
        assert_eq!(
            labels,
            [
                ("pid", ""),
                ("comm", "рабочий-процесс"),
                ("container", &id),
                ("pod_uid", "1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f")
            ]
        );
    }

    /// A pprof message as other producers write it, with a string table
    /// built from `strings` (index 0 is "").
    fn message(strings: &[&str]) -> proto::Profile {
        proto::Profile {
            string_table: std::iter::once("")
                .chain(strings.iter().copied())
                .map(String::from)
                .collect(),
            ..Default::default()
        }
    }

    fn value_type(t: i64, u: i64) -> proto::ValueType {
        proto::ValueType { r#type: t, unit: u }
    }

    #[test]
    fn inlined_frames_expand_innermost_last_and_cpu_time_becomes_counts() {
        // 1 cpu, 2 nanoseconds, 3 memcpy, 4 printf, 5 main, 6 libc.so, 7 app
        let mut m = message(&[
            "cpu",
            "nanoseconds",
            "memcpy",
            "printf",
            "main",
            "libc.so",
            "app",
        ]);
        m.sample_type = vec![value_type(1, 2)];
        m.period_type = Some(value_type(1, 2));
        m.period = 10_000_000;
        m.mapping = vec![
            proto::Mapping {
                id: 1,
                filename: 7,
                memory_start: 0x40_0000,
                file_offset: 0x1000,
                ..Default::default()
            },
            proto::Mapping {
                id: 2,
                filename: 6,
                ..Default::default()
            },
        ];
        m.function = vec![
            proto::Function {
                id: 10,
                name: 3,
                ..Default::default()
            },
            proto::Function {
                id: 11,
                name: 4,
                ..Default::default()
            },
            proto::Function {
                id: 12,
                name: 5,
                filename: 7,
                ..Default::default()
            },
        ];
        let line = |function_id| proto::Line {
            function_id,
            ..Default::default()
        };
        m.location = vec![
            // memcpy inlined into printf, in libc.
            proto::Location {
                id: 100,
                mapping_id: 2,
                line: vec![line(10), line(11)],
                ..Default::default()
            },
            proto::Location {
                id: 101,
                line: vec![line(12)],
                ..Default::default()
            },
            // Not symbolised: named by its offset into app.
            proto::Location {
                id: 102,
                mapping_id: 1,
                address: 0x40_0123,
                ..Default::default()
            },
        ];
        m.sample = vec![proto::Sample {
            location_id: vec![100, 102, 101],
            value: vec![29_600_000],
            label: Vec::new(),
        }];
        let profile = decode(&m.encode_to_vec()).unwrap();
        assert_eq!(profile.frequency, 100);
        assert_eq!(
            stacks(&profile),
            [(
                Default::default(),
                vec![
                    ("main".into(), "app".into()),
                    ("0x1123".into(), "app".into()),
                    ("printf".into(), "libc.so".into()),
                    ("memcpy".into(), "libc.so".into()),
                ],
                3
            )]
        );
    }

    /// A valid message with one sample, to break in the error tests.
    fn one_sample() -> proto::Profile {
        let mut m = message(&["samples", "count", "f"]);
        m.sample_type = vec![value_type(1, 2)];
        m.function = vec![proto::Function {
            id: 1,
            name: 3,
            ..Default::default()
        }];
        m.location = vec![proto::Location {
            id: 1,
            line: vec![proto::Line {
                function_id: 1,
                ..Default::default()
            }],
            ..Default::default()
        }];
        m.sample = vec![proto::Sample {
            location_id: vec![1],
            value: vec![5],
            label: Vec::new(),
        }];
        m
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(decode(&one_sample().encode_to_vec()).unwrap().samples(), 5);

        let err = decode(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff garbage").unwrap_err();
        assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
        assert!(
            err.to_string().starts_with("not gzip or protobuf: "),
            "{err}"
        );

        let gz = encode(&sample_profile());
        let err = decode(&gz[..gz.len() / 2]).unwrap_err();
        assert!(matches!(err, DecodeError::Gzip(_)), "{err}");

        let mut m = one_sample();
        m.sample[0].location_id = vec![1, 2];
        let err = decode(&m.encode_to_vec()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid pprof: a sample refers to missing location 2"
        );

        let mut m = one_sample();
        m.function[0].name = 4;
        let err = decode(&m.encode_to_vec()).unwrap_err();
        assert!(
            err.to_string().contains("string index 4 out of range"),
            "{err}"
        );

        let mut m = one_sample();
        m.location[0].line[0].function_id = 9;
        assert!(decode(&m.encode_to_vec()).is_err());

        let mut m = one_sample();
        m.sample[0].value = vec![5, 6];
        assert!(decode(&m.encode_to_vec()).is_err());

        let mut m = one_sample();
        m.sample[0].value = vec![-5];
        assert!(decode(&m.encode_to_vec()).is_err());

        let mut m = one_sample();
        m.location[0].line = vec![m.location[0].line[0].clone(); 1000];
        m.sample[0].location_id = vec![1; 1000];
        let err = decode(&m.encode_to_vec()).unwrap_err();
        assert!(err.to_string().contains("frames"), "{err}");

        let mut m = one_sample();
        m.string_table.clear();
        assert!(decode(&m.encode_to_vec()).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = decode(&bytes);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&bytes).unwrap();
            let _ = decode(&gz.finish().unwrap());
        }

        #[test]
        fn decode_never_panics_on_mutated_encodings(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            gzip in any::<bool>(),
        ) {
            let mut bytes = to_message(&sample_profile()).encode_to_vec();
            for (at, byte) in edits {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            bytes.truncate(cut.index(bytes.len() + 1).max(1));
            if gzip {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&bytes).unwrap();
                bytes = gz.finish().unwrap();
            }
            let _ = decode(&bytes);
        }
    }

    /// `go` with an environment that works in a bare CI container, or
    /// `None` (and a note why) when Go is not installed.
    fn go(dir: &Path) -> Option<Command> {
        match Command::new("go").arg("version").output() {
            Ok(out) if out.status.success() => {}
            _ => {
                eprintln!("skipped: `go` is not on PATH");
                return None;
            }
        }
        let mut cmd = Command::new("go");
        cmd.current_dir(dir)
            // Use the installed Go, never download a toolchain.
            .env("GOTOOLCHAIN", "local")
            // pprof writes nothing here for a local file, but keep it out
            // of the user's home either way.
            .env("PPROF_TMPDIR", dir);
        if std::env::var_os("HOME").is_none() {
            // The go command needs a build cache, found through $HOME.
            cmd.env("HOME", dir);
        }
        Some(cmd)
    }

    /// `go tool pprof -top`'s table as (name, flat%, cum%).
    fn pprof_top(text: &str) -> Vec<(String, f64, f64)> {
        let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap();
        text.lines()
            .skip_while(|l| !l.contains("flat%"))
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                // flat flat% sum% cum cum% name (the name may hold spaces)
                let cols: Vec<&str> = l.split_whitespace().collect();
                assert!(cols.len() >= 6, "a row of -top: {l:?}");
                (cols[5..].join(" "), pct(cols[1]), pct(cols[4]))
            })
            .collect()
    }

    #[test]
    fn go_tool_pprof_reads_the_same_shares() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut cmd) = go(dir.path()) else {
            return;
        };
        let mut b = ProfileBuilder::new(99, 1_700_000_000_000_000_000, 10_000_000_000);
        let (main, work, hot, cold) = (
            f("main", "/usr/bin/app"),
            f("work", "/usr/bin/app"),
            f("hot", "/usr/lib/libhot.so"),
            f("cold", ""),
        );
        // hot's 70 samples come from two processes: pprof must add them.
        b.add(&p(1, "app"), [&main, &work, &hot], 40);
        b.add(&p(2, "app2"), [&main, &work, &hot], 30);
        b.add(&p(1, "app"), [&main, &work, &cold], 30);
        let profile = b.finish();
        let file = dir.path().join("cpu.pb.gz");
        std::fs::write(&file, encode(&profile)).unwrap();

        let out = cmd
            .args(["tool", "pprof", "-top", "-nodecount=100"])
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "go tool pprof: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = pprof_top(&text);

        // Our shares: self = the leaf frame, cumulative = anywhere in the
        // stack (once per stack).
        let total = profile.samples() as f64;
        let share = |name: &str, cumulative: bool| {
            let n: u64 = profile
                .stacks
                .iter()
                .filter(|s| {
                    let named = |&i: &u32| profile.function(i).name == name;
                    if cumulative {
                        s.frames.iter().any(named)
                    } else {
                        s.frames.last().is_some_and(named)
                    }
                })
                .map(|s| s.count)
                .sum();
            100.0 * n as f64 / total
        };
        assert_eq!(rows.len(), profile.functions.len(), "{text}");
        for (name, flat, cum) in &rows {
            assert!(
                (flat - share(name, false)).abs() < 0.1,
                "{name} flat\n{text}"
            );
            assert!((cum - share(name, true)).abs() < 0.1, "{name} cum\n{text}");
        }
        let row = |name: &str| rows.iter().find(|r| r.0 == name).unwrap();
        assert_eq!(row("hot").1, 70.0);
        assert_eq!(row("cold").1, 30.0);
        assert_eq!(row("work").2, 100.0);
    }

    #[test]
    fn a_cpu_profile_written_by_go_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut cmd) = go(dir.path()) else {
            return;
        };
        std::fs::write(dir.path().join("go.mod"), "module sondeburn\n\ngo 1.21\n").unwrap();
        std::fs::write(
            dir.path().join("main.go"),
            r#"package main

import (
	"os"
	"runtime/pprof"
	"time"
)

var sink uint64

//go:noinline
func sondeBurnCPU(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 100000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
}

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		panic(err)
	}
	sondeBurnCPU(400 * time.Millisecond)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		panic(err)
	}
}
"#,
        )
        .unwrap();
        let file = dir.path().join("go.pprof");
        let out = cmd
            .env("GOFLAGS", "-mod=mod")
            .args(["run", "."])
            .arg(&file)
            .output()
            .unwrap();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if ["dial tcp", "proxy.golang.org", "no such host"]
                .iter()
                .any(|s| err.contains(s))
            {
                eprintln!("skipped: `go run` needs the network here: {err}");
                return;
            }
            panic!("go run: {err}");
        }
        let profile = decode(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(profile.frequency, 100, "runtime/pprof samples at 100 Hz");
        assert!(profile.samples() > 0);
        let burn = profile
            .functions
            .iter()
            .find(|f| f.name == "main.sondeBurnCPU")
            .unwrap_or_else(|| panic!("the burning function among {:?}", profile.functions));
        assert!(burn.module.ends_with("main.go"), "{burn:?}");
        assert!(profile.start_ns > 0 && profile.duration_ns > 0);
    }
}
