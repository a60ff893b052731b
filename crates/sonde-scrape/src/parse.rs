//! The Prometheus text exposition format 0.0.4 and OpenMetrics 1.0 text,
//! one parser for both: a body is read line by line, each sample handed to
//! the caller's closure as a [`Sample`] borrowed from the line (label
//! values with escapes are unescaped into a buffer the parser keeps).
//!
//! What differs between the two formats is left to the sample's
//! [`Family`] and [`Role`]: an OpenMetrics counter family `foo` has the
//! samples `foo_total` and `foo_created`, a 0.0.4 one is named after its
//! sample. Timestamps are read past and not kept (a scrape's points take
//! the time they were scraped), and so are OpenMetrics exemplars
//! (`# {trace_id="..."} 1.0` after a value). `# EOF` ends the body.
//!
//! A line that does not parse is counted ([`Summary::malformed`]) and
//! skipped; the lines around it still count.

use std::ops::Range;

/// A metric family's type, from its `# TYPE` line; samples without one are
/// [`MetricType::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// `counter`.
    Counter,
    /// `gauge`.
    Gauge,
    /// `histogram`.
    Histogram,
    /// OpenMetrics `gaugehistogram`.
    GaugeHistogram,
    /// `summary`.
    Summary,
    /// OpenMetrics `info`.
    Info,
    /// OpenMetrics `stateset`.
    StateSet,
    /// `untyped` (0.0.4), `unknown` (OpenMetrics), or no `# TYPE` line.
    Unknown,
}

impl MetricType {
    fn from_word(word: &str) -> MetricType {
        match word {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            _ => MetricType::Unknown,
        }
    }

    /// The suffixes of this type's samples after the family's name.
    fn suffixes(self) -> &'static [(&'static str, Role)] {
        match self {
            MetricType::Counter => &[("_total", Role::Total), ("_created", Role::Created)],
            MetricType::Histogram => &[
                ("_bucket", Role::Bucket),
                ("_sum", Role::Sum),
                ("_count", Role::Count),
                ("_created", Role::Created),
            ],
            MetricType::GaugeHistogram => &[
                ("_bucket", Role::Bucket),
                ("_gsum", Role::Sum),
                ("_gcount", Role::Count),
            ],
            MetricType::Summary => &[
                ("_sum", Role::Sum),
                ("_count", Role::Count),
                ("_created", Role::Created),
            ],
            MetricType::Info => &[("_info", Role::Plain)],
            MetricType::Gauge | MetricType::StateSet | MetricType::Unknown => &[],
        }
    }
}

/// What a sample is within its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Named as the family: a gauge's, a 0.0.4 counter's, a summary's
    /// quantiles, an untyped sample.
    Plain,
    /// An OpenMetrics counter's `_total`.
    Total,
    /// `_created`: when the series started, in unix seconds.
    Created,
    /// A histogram's `_bucket` (with its `le` label).
    Bucket,
    /// `_sum` (`_gsum` of a gauge histogram).
    Sum,
    /// `_count` (`_gcount` of a gauge histogram).
    Count,
}

/// The family a sample belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// Its type.
    pub ty: MetricType,
    /// What the sample is in it.
    pub role: Role,
}

/// Where a label's value is: in the line as written, or unescaped into
/// the parser's buffer.
#[derive(Clone, Debug)]
enum Text {
    Line(Range<usize>),
    Unescaped(Range<usize>),
}

#[derive(Clone, Debug)]
struct Label {
    name: Range<usize>,
    value: Text,
}

/// One sample, borrowed from the body's line.
#[derive(Debug)]
pub struct Sample<'a> {
    /// The metric name as exposed (`node_cpu_seconds_total`).
    pub name: &'a str,
    /// The value (NaN and infinities as written).
    pub value: f64,
    /// Its family's type and its role in it.
    pub family: Family,
    line: &'a str,
    labels: &'a [Label],
    unescaped: &'a str,
}

impl<'a> Sample<'a> {
    /// The labels, in the order written.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.labels.iter().map(|l| {
            let value = match &l.value {
                Text::Line(r) => &self.line[r.clone()],
                Text::Unescaped(r) => &self.unescaped[r.clone()],
            };
            (&self.line[l.name.clone()], value)
        })
    }

    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&'a str> {
        self.labels().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// What a body held besides its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Samples handed to the caller.
    pub samples: usize,
    /// Lines that do not parse, skipped.
    pub malformed: usize,
    /// Lines that are not UTF-8, skipped.
    pub not_utf8: usize,
    /// The body ended with OpenMetrics' `# EOF`.
    pub eof: bool,
}

/// The parser, keeping its buffers from one body to the next.
#[derive(Debug, Default)]
pub struct Parser {
    labels: Vec<Label>,
    unescaped: String,
    family: String,
    family_type: Option<MetricType>,
}

/// Why a line does not parse; counted, not shown.
#[derive(Debug)]
struct Malformed;

impl Parser {
    /// A parser with empty buffers.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Parses `body`, calling `each` for every sample in order.
    pub fn parse(&mut self, body: &[u8], mut each: impl FnMut(&Sample<'_>)) -> Summary {
        let mut summary = Summary::default();
        self.family.clear();
        self.family_type = None;
        for line in body.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(|b| *b == b' ' || *b == b'\t') {
                continue;
            }
            let Ok(line) = std::str::from_utf8(line) else {
                summary.not_utf8 += 1;
                continue;
            };
            if let Some(comment) = line.strip_prefix('#') {
                if comment.trim() == "EOF" {
                    summary.eof = true;
                    break;
                }
                self.comment(comment);
                continue;
            }
            match self.sample(line) {
                Ok((name, value)) => {
                    let family = self.family_of(name);
                    summary.samples += 1;
                    each(&Sample {
                        name,
                        value,
                        family,
                        line,
                        labels: &self.labels,
                        unescaped: &self.unescaped,
                    });
                }
                Err(Malformed) => summary.malformed += 1,
            }
        }
        summary
    }

    /// `# TYPE name type` starts a family; `# HELP`, `# UNIT` and other
    /// comments say nothing the points keep.
    fn comment(&mut self, comment: &str) {
        let mut words = comment.split_ascii_whitespace();
        if words.next() != Some("TYPE") {
            return;
        }
        let (Some(name), Some(ty)) = (words.next(), words.next()) else {
            return;
        };
        self.family.clear();
        self.family.push_str(name);
        self.family_type = Some(MetricType::from_word(ty));
    }

    /// The family of a sample named `name`: the last `# TYPE`'s when the
    /// name is the family's or the family's plus one of its type's
    /// suffixes, else none (an untyped sample). A family's samples follow
    /// its `# TYPE` line in both formats.
    fn family_of(&self, name: &str) -> Family {
        let unknown = Family {
            ty: MetricType::Unknown,
            role: Role::Plain,
        };
        let Some(ty) = self.family_type else {
            return unknown;
        };
        let Some(rest) = name.strip_prefix(self.family.as_str()) else {
            return unknown;
        };
        if rest.is_empty() {
            return Family {
                ty,
                role: Role::Plain,
            };
        }
        ty.suffixes()
            .iter()
            .find(|(s, _)| *s == rest)
            .map_or(unknown, |&(_, role)| Family { ty, role })
    }

    /// Reads `name{labels} value [timestamp] [# exemplar]` into the
    /// parser's label list; returns the name and the value.
    fn sample<'l>(&mut self, line: &'l str) -> Result<(&'l str, f64), Malformed> {
        self.labels.clear();
        self.unescaped.clear();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() && is_name_byte(b[i], i == 0) {
            i += 1;
        }
        if i == 0 {
            return Err(Malformed);
        }
        let name = &line[..i];
        let j = skip_blank(b, i);
        if b.get(j) == Some(&b'{') {
            i = self.labels(line, j + 1)?;
        }
        let rest = &line[i..];
        if !rest.starts_with([' ', '\t']) {
            return Err(Malformed);
        }
        let mut words = rest.split_ascii_whitespace();
        let value = words.next().ok_or(Malformed).and_then(parse_value)?;
        // A timestamp, then OpenMetrics' exemplar: read past.
        match words.next() {
            None | Some("#") => {}
            Some(ts) if ts.parse::<f64>().is_ok() => match words.next() {
                None | Some("#") => {}
                Some(_) => return Err(Malformed),
            },
            Some(_) => return Err(Malformed),
        }
        Ok((name, value))
    }

    /// Reads labels from `line[i..]` (just past `{`) up to and past `}`.
    fn labels(&mut self, line: &str, mut i: usize) -> Result<usize, Malformed> {
        let b = line.as_bytes();
        loop {
            i = skip_blank(b, i);
            if b.get(i) == Some(&b'}') {
                return Ok(i + 1);
            }
            let start = i;
            while i < b.len() && is_name_byte(b[i], i == start) && b[i] != b':' {
                i += 1;
            }
            if i == start {
                return Err(Malformed);
            }
            let name = start..i;
            i = skip_blank(b, i);
            if b.get(i) != Some(&b'=') {
                return Err(Malformed);
            }
            i = skip_blank(b, i + 1);
            if b.get(i) != Some(&b'"') {
                return Err(Malformed);
            }
            i += 1;
            let vstart = i;
            let Some(len) = memchr::memchr2(b'"', b'\\', &b[i..]) else {
                return Err(Malformed);
            };
            i += len;
            let value = if b[i] == b'"' {
                Text::Line(vstart..i)
            } else {
                // Escapes: `\\`, `\"` and `\n`; the value is unescaped
                // into the parser's buffer.
                let ustart = self.unescaped.len();
                self.unescaped.push_str(&line[vstart..i]);
                loop {
                    match b.get(i) {
                        Some(b'"') => break,
                        Some(b'\\') => {
                            match b.get(i + 1) {
                                Some(b'n') => self.unescaped.push('\n'),
                                Some(b'\\') => self.unescaped.push('\\'),
                                Some(b'"') => self.unescaped.push('"'),
                                _ => return Err(Malformed),
                            }
                            i += 2;
                        }
                        Some(_) => {
                            let n = memchr::memchr2(b'"', b'\\', &b[i..]).ok_or(Malformed)?;
                            self.unescaped.push_str(&line[i..i + n]);
                            i += n;
                        }
                        None => return Err(Malformed),
                    }
                }
                Text::Unescaped(ustart..self.unescaped.len())
            };
            i += 1;
            self.labels.push(Label { name, value });
            i = skip_blank(b, i);
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => return Ok(i + 1),
                _ => return Err(Malformed),
            }
        }
    }
}

fn is_name_byte(b: u8, first: bool) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':' || (!first && b.is_ascii_digit())
}

fn skip_blank(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// A sample's value: a float as Go writes it, `NaN`, `+Inf`, `-Inf`.
fn parse_value(word: &str) -> Result<f64, Malformed> {
    match word {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        // Rust's parser takes "inf" and "nan" spelled any way; the formats
        // spell them as above only.
        w if w
            .bytes()
            .any(|c| c.is_ascii_alphabetic() && c != b'e' && c != b'E') =>
        {
            Err(Malformed)
        }
        w => w.parse().map_err(|_| Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(body: &str) -> (Vec<String>, Summary) {
        let mut out = Vec::new();
        let summary = Parser::new().parse(body.as_bytes(), |s| {
            let labels: Vec<String> = s.labels().map(|(k, v)| format!("{k}={v:?}")).collect();
            out.push(format!(
                "{} {{{}}} {} {:?}/{:?}",
                s.name,
                labels.join(","),
                s.value,
                s.family.ty,
                s.family.role
            ));
        });
        (out, summary)
    }

    #[test]
    fn text_004_families_labels_and_values_parse() {
        let body = "# HELP http_requests_total The total.\n\
# TYPE http_requests_total counter\n\
http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n\
http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\n\
\n\
# TYPE rpc_duration_seconds summary\n\
rpc_duration_seconds{quantile=\"0.5\"} 4773\n\
rpc_duration_seconds_sum 1.7560473e+07\n\
rpc_duration_seconds_count 2693\n\
# TYPE req histogram\n\
req_bucket{le=\"0.05\"} 24054\n\
req_bucket{le=\"+Inf\"} 144320\n\
req_sum 53423\n\
req_count 144320\n\
metric_without_timestamp_and_labels 12.47\n\
msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} 1.458255915e9\n\
something_weird{problem=\"division by zero\"} +Inf -3982045\n\
trailing_comma{a=\"1\",} -Inf\n\
nan_value NaN\n";
        let (got, summary) = all(body);
        assert_eq!(
            got,
            [
                "http_requests_total {method=\"post\",code=\"200\"} 1027 Counter/Plain",
                "http_requests_total {method=\"post\",code=\"400\"} 3 Counter/Plain",
                "rpc_duration_seconds {quantile=\"0.5\"} 4773 Summary/Plain",
                "rpc_duration_seconds_sum {} 17560473 Summary/Sum",
                "rpc_duration_seconds_count {} 2693 Summary/Count",
                "req_bucket {le=\"0.05\"} 24054 Histogram/Bucket",
                "req_bucket {le=\"+Inf\"} 144320 Histogram/Bucket",
                "req_sum {} 53423 Histogram/Sum",
                "req_count {} 144320 Histogram/Count",
                // A name outside the last family is untyped.
                "metric_without_timestamp_and_labels {} 12.47 Unknown/Plain",
                "msdos_file_access_time_seconds {path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} 1458255915 Unknown/Plain",
                "something_weird {problem=\"division by zero\"} inf Unknown/Plain",
                "trailing_comma {a=\"1\"} -inf Unknown/Plain",
                "nan_value {} NaN Unknown/Plain",
            ]
        );
        assert_eq!(
            summary,
            Summary {
                samples: 14,
                malformed: 0,
                not_utf8: 0,
                eof: false
            }
        );
    }

    #[test]
    fn openmetrics_suffixes_exemplars_and_eof() {
        let body = "# TYPE acme_http_router_request_seconds summary\n\
# UNIT acme_http_router_request_seconds seconds\n\
acme_http_router_request_seconds_sum{path=\"/api/v1\",method=\"GET\"} 9036.32\n\
acme_http_router_request_seconds_count{path=\"/api/v1\",method=\"GET\"} 807283.0\n\
acme_http_router_request_seconds_created{path=\"/api/v1\",method=\"GET\"} 1605281325.0\n\
# TYPE foo counter\n\
foo_total 17.0 1520879607.789 # {id=\"counter-test\"} 5\n\
foo_created 1520872607.123\n\
# TYPE build info\n\
build_info{version=\"1.2\"} 1\n\
# TYPE g gaugehistogram\n\
g_bucket{le=\"1\"} 2\n\
g_gsum 3\n\
g_gcount 2\n\
# EOF\n\
after_eof 1\n";
        let (got, summary) = all(body);
        assert_eq!(
            got,
            [
                "acme_http_router_request_seconds_sum {path=\"/api/v1\",method=\"GET\"} 9036.32 Summary/Sum",
                "acme_http_router_request_seconds_count {path=\"/api/v1\",method=\"GET\"} 807283 Summary/Count",
                "acme_http_router_request_seconds_created {path=\"/api/v1\",method=\"GET\"} 1605281325 Summary/Created",
                "foo_total {} 17 Counter/Total",
                "foo_created {} 1520872607.123 Counter/Created",
                "build_info {version=\"1.2\"} 1 Info/Plain",
                "g_bucket {le=\"1\"} 2 GaugeHistogram/Bucket",
                "g_gsum {} 3 GaugeHistogram/Sum",
                "g_gcount {} 2 GaugeHistogram/Count",
            ]
        );
        assert!(summary.eof);
    }

    #[test]
    fn bad_lines_are_counted_and_the_rest_parses() {
        let body = b"ok 1\n\
1bad 2\n\
no_value\n\
bad_value abc\n\
inf_spelled_lower inf\n\
unclosed{a=\"x} 1\n\
bad_escape{a=\"\\q\"} 1\n\
extra 1 2 3\n\
\xff\xfe 1\n\
ok2{a=\"b\"} 2\n";
        let mut names = Vec::new();
        let summary = Parser::new().parse(body, |s| names.push(s.name.to_string()));
        assert_eq!(names, ["ok", "ok2"]);
        assert_eq!(summary.malformed, 7);
        assert_eq!(summary.not_utf8, 1);
    }

    #[test]
    fn node_exporter_output_parses_whole() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/node_exporter.txt"
        ))
        .unwrap();
        let lines = body
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && l[0] != b'#')
            .count();
        let mut counters = 0;
        let summary = Parser::new().parse(&body, |s| {
            if s.family.ty == MetricType::Counter {
                counters += 1;
            }
        });
        assert_eq!(summary.samples, lines);
        assert_eq!(summary.malformed + summary.not_utf8, 0);
        assert!(counters > 10);
    }
}
