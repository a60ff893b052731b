//! What the load looks like: series, tags, types, datagram packing.
//!
//! Datagrams are generated once, before sending, into a pool that the
//! sender cycles through, so the generator spends its CPU on system calls,
//! not on formatting.

use std::fmt::Write;

/// The wire protocol of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// metricserver2 msgpack: one message, or array16 bunches.
    Msgpack,
    /// StatsD lines (DogStatsD tags), newline separated.
    Statsd,
}

/// Relative weights of the metric types in the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mix {
    /// Counters (msgpack `counter`, StatsD `c`).
    pub counter: u32,
    /// Gauges (msgpack `store`, StatsD `g`).
    pub gauge: u32,
    /// Timers (msgpack `timer`, StatsD `ms`).
    pub timer: u32,
    /// Histograms (msgpack `histogram`, StatsD `h`).
    pub histogram: u32,
}

impl Default for Mix {
    /// 4 : 2 : 2 : 2, the peers' benchmark mix (docs/BENCHMARKS.md).
    fn default() -> Self {
        Mix {
            counter: 4,
            gauge: 2,
            timer: 2,
            histogram: 2,
        }
    }
}

impl std::str::FromStr for Mix {
    type Err = String;

    /// `counter:gauge:timer[:histogram]`, e.g. `4:2:2:2` or `1:0:0`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Result<Vec<u32>, _> = s.split(':').map(str::parse).collect();
        match parts.map_err(|e| format!("mix {s:?}: {e}"))?[..] {
            [c, g, t] => Ok(Mix {
                counter: c,
                gauge: g,
                timer: t,
                histogram: 0,
            }),
            [c, g, t, h] if c + g + t + h > 0 => Ok(Mix {
                counter: c,
                gauge: g,
                timer: t,
                histogram: h,
            }),
            _ => Err(format!(
                "mix {s:?}: write counter:gauge:timer[:histogram], e.g. 4:2:2:2"
            )),
        }
    }
}

/// The load's shape.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Shape {
    /// Wire protocol.
    pub protocol: Protocol,
    /// Distinct series.
    pub series: usize,
    /// Tags per point (one of them is the series id when > 0).
    pub tags: usize,
    /// Points per datagram; 0 packs as many as fit in `max_bytes`.
    pub points_per_datagram: usize,
    /// Largest datagram: 1400 fits one Ethernet MTU, 32768 is a msgpack bunch.
    pub max_bytes: usize,
    /// Type mix.
    pub mix: Mix,
}

/// One pre-built datagram.
#[derive(Clone, Debug)]
pub struct Datagram {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Points inside.
    pub points: u32,
}

impl Shape {
    fn kind(&self, i: usize) -> usize {
        let m = self.mix;
        let total = (m.counter + m.gauge + m.timer + m.histogram).max(1) as usize;
        let r = i % total;
        let (c, g, t) = (m.counter as usize, m.gauge as usize, m.timer as usize);
        if r < c {
            0
        } else if r < c + g {
            1
        } else if r < c + g + t {
            2
        } else {
            3
        }
    }

    /// The `n`-th point of the series `s`, encoded alone.
    fn point(&self, s: usize, n: usize, out: &mut Vec<u8>) {
        // The series id decides the type, so a series never changes type.
        let kind = self.kind(s);
        let name = format!("bench.metric_{}", s % 100);
        let value = (n * 37 + s) % 1000;
        let mut tags = String::new();
        for t in 0..self.tags {
            let sep = match (self.protocol, t) {
                (_, 0) => "",
                (Protocol::Msgpack, _) => "|",
                (Protocol::Statsd, _) => ",",
            };
            let kv = if self.protocol == Protocol::Msgpack {
                '='
            } else {
                ':'
            };
            let _ = match t {
                0 => write!(tags, "{sep}series{kv}s{s}"),
                1 => write!(tags, "{sep}env{kv}prod"),
                2 => write!(tags, "{sep}region{kv}eu-west-{}", s % 3),
                _ => write!(tags, "{sep}tag{t}{kv}value{}", s % 7),
            };
        }
        match self.protocol {
            Protocol::Statsd => {
                let ty = ["c", "g", "ms", "h"][kind];
                let _ = write!(ByteWriter(out), "{name}:{value}|{ty}");
                if !tags.is_empty() {
                    let _ = write!(ByteWriter(out), "|#{tags}");
                }
            }
            Protocol::Msgpack => {
                let ty = ["counter", "store", "timer", "histogram"][kind];
                let _ = rmp::encode::write_array_len(out, 6);
                for f in ["emit", ty, &name, &value.to_string(), &tags, ""] {
                    let _ = rmp::encode::write_str(out, f);
                }
            }
        }
    }

    /// Builds datagrams holding `total` points, visiting the series in a
    /// stride order so consecutive points belong to different series.
    pub fn datagrams(&self, total: usize) -> Vec<Datagram> {
        let series = self.series.max(1);
        let stride = if series > 1 {
            coprime_stride(series)
        } else {
            1
        };
        let per = if self.points_per_datagram == 0 {
            usize::MAX
        } else {
            self.points_per_datagram
        };
        let mut out = Vec::new();
        let mut body = Vec::new();
        let mut points = 0u32;
        let mut one = Vec::new();
        let header = match self.protocol {
            Protocol::Msgpack => 3,
            Protocol::Statsd => 0,
        };
        let flush = |body: &mut Vec<u8>, points: &mut u32, out: &mut Vec<Datagram>| {
            if *points == 0 {
                return;
            }
            let bytes = match self.protocol {
                Protocol::Statsd => std::mem::take(body),
                Protocol::Msgpack if *points == 1 => std::mem::take(body),
                Protocol::Msgpack => {
                    let mut b = Vec::with_capacity(body.len() + 3);
                    b.push(0xdc);
                    b.extend_from_slice(&(*points as u16).to_be_bytes());
                    b.append(body);
                    b
                }
            };
            out.push(Datagram {
                bytes,
                points: *points,
            });
            *points = 0;
        };
        for n in 0..total {
            let s = (n * stride) % series;
            one.clear();
            self.point(s, n, &mut one);
            let sep = usize::from(self.protocol == Protocol::Statsd && points > 0);
            let full = points as usize >= per
                || points == u16::MAX as u32
                || (points > 0 && header + body.len() + sep + one.len() > self.max_bytes);
            if full {
                flush(&mut body, &mut points, &mut out);
            }
            if self.protocol == Protocol::Statsd && points > 0 {
                body.push(b'\n');
            }
            body.extend_from_slice(&one);
            points += 1;
        }
        flush(&mut body, &mut points, &mut out);
        out
    }
}

/// A stride near the golden ratio of `n` that is coprime with it, so
/// `i * stride % n` visits every series once per `n` points.
fn coprime_stride(n: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut s = (n as f64 * 0.618_033_988_7) as usize | 1;
    while gcd(s, n) != 1 {
        s += 2;
    }
    s
}

struct ByteWriter<'a>(&'a mut Vec<u8>);

impl Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(protocol: Protocol, per: usize, max: usize) -> Shape {
        Shape {
            protocol,
            series: 10,
            tags: 3,
            points_per_datagram: per,
            max_bytes: max,
            mix: Mix::default(),
        }
    }

    #[test]
    fn statsd_lines_pack_up_to_the_size_limit() {
        let d = shape(Protocol::Statsd, 0, 1400).datagrams(1000);
        assert!(d.iter().all(|d| d.bytes.len() <= 1400));
        assert_eq!(d.iter().map(|d| d.points as usize).sum::<usize>(), 1000);
        let first = String::from_utf8(d[0].bytes.clone()).unwrap();
        assert_eq!(first.lines().count(), d[0].points as usize);
        assert!(
            first.starts_with("bench.metric_0:0|c|#series:s0,env:prod,region:eu-west-0\n"),
            "{first}"
        );
    }

    #[test]
    fn msgpack_bunches_carry_their_count() {
        let d = shape(Protocol::Msgpack, 0, 32 * 1024).datagrams(2000);
        assert!(d.len() > 1);
        for dg in &d {
            assert!(dg.bytes.len() <= 32 * 1024);
            assert_eq!(dg.bytes[0], 0xdc);
            assert_eq!(
                u16::from_be_bytes([dg.bytes[1], dg.bytes[2]]) as u32,
                dg.points
            );
        }
    }

    #[test]
    fn one_point_per_datagram_sends_bare_messages() {
        let d = shape(Protocol::Msgpack, 1, 1400).datagrams(5);
        assert_eq!(d.len(), 5);
        assert!(d.iter().all(|d| d.points == 1 && d.bytes[0] == 0x96));
    }

    #[test]
    fn every_series_is_visited() {
        let s = Shape {
            series: 1000,
            ..shape(Protocol::Statsd, 1, 1400)
        };
        let d = s.datagrams(1000);
        let names: std::collections::HashSet<Vec<u8>> = d
            .iter()
            .map(|d| d.bytes.split(|&b| b == b'|').nth(2).unwrap().to_vec())
            .collect();
        assert_eq!(names.len(), 1000);
    }

    #[test]
    fn mixes_parse() {
        assert_eq!("4:2:2:2".parse::<Mix>().unwrap(), Mix::default());
        assert_eq!("1:0:0".parse::<Mix>().unwrap().counter, 1);
        assert!("0:0:0:0".parse::<Mix>().is_err());
        assert!("a:b".parse::<Mix>().is_err());
    }
}
