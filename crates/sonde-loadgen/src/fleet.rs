//! A synthetic fleet's profiles, made from real ones, for measuring a
//! fleet store (`sonde-fleetgen`).
//!
//! [`Source`] holds real periods (an agent's stored profiles), their
//! functions interned into one table. [`Fleet`] makes, for host `h` and
//! minute `m`, a period that host could have sampled: one of the real
//! periods (each host starts at another), with
//!
//! * **its own process mix**: each process name of the source runs on a
//!   host with probability [`Shape::mix`] (decided once per host);
//! * **its own pids**: each process gets a pid drawn from the host and
//!   the source's pid, drawn again every 6 hours (a restart);
//! * **its own hot stacks**: each stack's samples are scaled by a factor
//!   drawn once per host and stack (log-normal, σ = 0.8), by the host's
//!   load (0.3 to 1.0 of the source's) and by a day's curve (±25%), then
//!   drawn from a Poisson law of that mean, so a period keeps the real
//!   long tail of stacks seen once;
//! * **its own version**: hosts are split into [`Shape::versions`]
//!   cohorts, and each cohort after the first renames 2% of the
//!   functions outside the kernel, as a deployment of another build
//!   would: the stacks through them are that cohort's own, the rest are
//!   shared by the whole fleet.
//!
//! Everything is drawn from the seed, the host and the minute, so a run
//! is the same every time and a period does not depend on the order the
//! periods are made in.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use sonde_profile::model::{Function, Process, Profile, Stack};

/// How the fleet varies.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The seed of every draw.
    pub seed: u64,
    /// The share of the source's process names each host runs (0 to 1).
    pub mix: f64,
    /// Deployed versions: cohorts of hosts whose binaries differ.
    pub versions: u32,
    /// Scales every stack's samples (1 is the source host's load).
    pub load: f64,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            seed: 1,
            mix: 0.75,
            versions: 3,
            load: 1.0,
        }
    }
}

/// One stack of a real period.
#[derive(Debug, Clone)]
struct SourceStack {
    /// Index into [`Source::processes`] (a thread of a process).
    process: u32,
    /// Indices into [`Source::functions`], root first.
    frames: Vec<u32>,
    count: u64,
    /// The same for every period with this process name and frames.
    key: u32,
}

/// Real periods, their functions in one table.
#[derive(Debug, Clone, Default)]
pub struct Source {
    functions: Vec<Function>,
    processes: Vec<Process>,
    /// Index into `names` of each process's name.
    process_name: Vec<u32>,
    names: Vec<String>,
    periods: Vec<Vec<SourceStack>>,
    frequency: u32,
}

impl Source {
    /// The periods of `profiles`, the empty ones left out.
    pub fn new(profiles: &[Profile]) -> Source {
        let mut s = Source::default();
        let mut functions: HashMap<Function, u32> = HashMap::new();
        let mut processes: HashMap<Process, u32> = HashMap::new();
        let mut names: HashMap<String, u32> = HashMap::new();
        let mut keys: HashMap<(u32, Vec<u32>), u32> = HashMap::new();
        for p in profiles.iter().filter(|p| p.samples() > 0) {
            s.frequency = p.frequency;
            let mut period = Vec::with_capacity(p.stacks.len());
            for st in &p.stacks {
                let proc = &p.processes[st.process as usize];
                let name_count = names.len() as u32;
                let name = *names.entry(proc.name.clone()).or_insert(name_count);
                if name == name_count {
                    s.names.push(proc.name.clone());
                }
                let mut key_proc = proc.clone();
                key_proc.host.clear();
                let proc_count = processes.len() as u32;
                let process = *processes.entry(key_proc.clone()).or_insert(proc_count);
                if process == proc_count {
                    s.processes.push(key_proc);
                    s.process_name.push(name);
                }
                let frames: Vec<u32> = st
                    .frames
                    .iter()
                    .map(|&f| {
                        let f = &p.functions[f as usize];
                        let n = functions.len() as u32;
                        let i = *functions.entry(f.clone()).or_insert(n);
                        if i == n {
                            s.functions.push(f.clone());
                        }
                        i
                    })
                    .collect();
                let n = keys.len() as u32;
                let key = *keys.entry((name, frames.clone())).or_insert(n);
                period.push(SourceStack {
                    process,
                    frames,
                    count: st.count,
                    key,
                });
            }
            s.periods.push(period);
        }
        s
    }

    /// How many periods.
    pub fn periods(&self) -> usize {
        self.periods.len()
    }

    /// Distinct stacks over all periods (by process name and frames).
    pub fn stacks(&self) -> usize {
        let mut keys: Vec<u32> = self.periods.iter().flatten().map(|s| s.key).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.len()
    }

    /// Samples per period, on average.
    pub fn samples_per_period(&self) -> f64 {
        let all: u64 = self.periods.iter().flatten().map(|s| s.count).sum();
        all as f64 / self.periods.len().max(1) as f64
    }
}

/// One synthetic host.
#[derive(Debug, Clone)]
pub struct Host {
    /// Its `agent.hostname`.
    pub name: String,
    index: u64,
    version: u32,
    /// Its load against the source's, 0.3 to 1.0.
    load: f64,
    /// Which source period its first minute is.
    offset: usize,
    /// Which process names run on it, by index into the source's names.
    runs: Vec<bool>,
    /// Minutes between its agent's start and the fleet's first period
    /// (0 to 59): when its stacks are written again (each day).
    pub phase: u64,
}

/// A synthetic fleet over a [`Source`].
#[derive(Debug)]
pub struct Fleet {
    source: Source,
    shape: Shape,
    hosts: Vec<Host>,
    /// `renamed[v - 1][f]`: the function index of source function `f` in
    /// version `v` (itself where unchanged).
    renamed: Vec<Vec<u32>>,
    /// Every function, the versions' renamed ones after the source's.
    functions: Vec<Function>,
}

/// A hash of the seed and `parts`, as a draw in [0, 1).
fn unit(seed: u64, parts: impl Hash) -> f64 {
    (mix(seed, parts) >> 11) as f64 / (1u64 << 53) as f64
}

fn mix(seed: u64, parts: impl Hash) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(seed);
    parts.hash(&mut h);
    h.finish()
}

/// A draw of a Poisson law of mean `mean`: Knuth's product of uniforms
/// below 30, a normal approximation above.
fn poisson(rng: &mut fastrand::Rng, mean: f64) -> u64 {
    if mean <= 0.0 {
        return 0;
    }
    if mean < 30.0 {
        let limit = (-mean).exp();
        let mut k = 0;
        let mut p = rng.f64();
        while p > limit {
            k += 1;
            p *= rng.f64();
        }
        return k;
    }
    // Box-Muller.
    let (u, v) = (rng.f64().max(f64::MIN_POSITIVE), rng.f64());
    let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
    (mean + mean.sqrt() * z).round().max(0.0) as u64
}

impl Fleet {
    /// `hosts` hosts named `fleet-000` and on, over `source`.
    ///
    /// # Panics
    ///
    /// When `source` holds no period.
    pub fn new(source: Source, hosts: usize, shape: Shape) -> Fleet {
        assert!(source.periods() > 0, "the source holds no samples");
        let seed = shape.seed;
        let width = hosts.saturating_sub(1).to_string().len().max(3);
        let mut functions = source.functions.clone();
        let mut renamed = Vec::new();
        for v in 1..shape.versions.max(1) {
            let mut map = Vec::with_capacity(source.functions.len());
            for (i, f) in source.functions.iter().enumerate() {
                if f.module != "[kernel]" && unit(seed, ("version", v, i)) < 0.02 {
                    map.push(functions.len() as u32);
                    functions.push(Function {
                        name: format!("{} (v{v})", f.name),
                        module: f.module.clone(),
                    });
                } else {
                    map.push(i as u32);
                }
            }
            renamed.push(map);
        }
        let hosts = (0..hosts as u64)
            .map(|h| Host {
                name: format!("fleet-{h:0width$}"),
                index: h,
                // 60% on the first version, the rest spread over the others.
                version: if shape.versions <= 1 || unit(seed, ("cohort", h)) < 0.6 {
                    0
                } else {
                    1 + (mix(seed, ("cohort-of", h)) % u64::from(shape.versions - 1)) as u32
                },
                load: 0.3 + 0.7 * unit(seed, ("load", h)),
                offset: (mix(seed, ("offset", h)) % source.periods() as u64) as usize,
                runs: (0..source.names.len())
                    .map(|n| unit(seed, ("runs", h, n)) < shape.mix)
                    .collect(),
                phase: mix(seed, ("phase", h)) % 60,
            })
            .collect();
        Fleet {
            source,
            shape,
            hosts,
            renamed,
            functions,
        }
    }

    /// The hosts.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// A profile to fill with [`Fleet::period`], holding every function.
    pub fn profile(&self) -> Profile {
        Profile {
            functions: self.functions.clone(),
            frequency: self.source.frequency,
            duration_ns: 60_000_000_000,
            ..Profile::default()
        }
    }

    /// Fills `out` (from [`Fleet::profile`]) with the period of `host`
    /// starting at `start_s`, minute `minute` of the run.
    pub fn period(&self, host: &Host, minute: u64, start_s: u64, out: &mut Profile) {
        let seed = self.shape.seed;
        out.processes.clear();
        out.stacks.clear();
        out.start_ns = start_s * 1_000_000_000;
        let src = &self.source;
        let period = &src.periods[(host.offset + minute as usize) % src.periods.len()];
        let mut rng = fastrand::Rng::with_seed(mix(seed, ("period", host.index, minute)));
        // A day's curve, each host in its own time zone.
        let day = (minute as f64 / 1440.0 + unit(seed, ("tz", host.index))) * std::f64::consts::TAU;
        let scale = self.shape.load * host.load * (1.0 + 0.25 * day.sin());
        let mut index: HashMap<u32, u32> = HashMap::new();
        for st in period {
            let proc = &src.processes[st.process as usize];
            if !host.runs[src.process_name[st.process as usize] as usize] {
                continue;
            }
            // log-normal, σ 0.8: a sum of three uniforms is near enough normal.
            let z = (0..3)
                .map(|i| unit(seed, ("hot", host.index, st.key, i)))
                .sum::<f64>()
                - 1.5;
            let hot = (0.8 * 2.0 * z).exp();
            let count = poisson(&mut rng, st.count as f64 * scale * hot);
            if count == 0 {
                continue;
            }
            let n = out.processes.len() as u32;
            let p = *index.entry(st.process).or_insert(n);
            if p == n {
                let epoch = (minute + host.phase + u64::from(proc.pid)) / 360;
                let pid = 1000 + (mix(seed, ("pid", host.index, proc.pid, epoch)) % 4_000_000);
                out.processes.push(Process {
                    pid: pid as u32,
                    tid: 0,
                    host: host.name.clone(),
                    ..proc.clone()
                });
            }
            let frames = match host.version {
                0 => st.frames.clone(),
                v => {
                    let map = &self.renamed[v as usize - 1];
                    st.frames.iter().map(|&f| map[f as usize]).collect()
                }
            };
            out.stacks.push(Stack {
                process: p,
                frames,
                count,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_profile::model::ProfileBuilder;

    fn source() -> Source {
        let mut periods = Vec::new();
        for m in 0..3u64 {
            let mut b = ProfileBuilder::new(19, m * 60_000_000_000, 60_000_000_000);
            for (pid, name) in [(10, "rustc"), (20, "ld"), (30, "cargo")] {
                let p = Process {
                    pid,
                    name: name.into(),
                    thread: name.into(),
                    ..Process::default()
                };
                for leaf in 0..40 {
                    let f = |n: &str| Function {
                        name: n.into(),
                        module: format!("/usr/bin/{name}"),
                    };
                    let frames = [f("main"), f(&format!("work{leaf}"))];
                    b.add(&p, &frames, 1 + leaf % 5);
                }
            }
            periods.push(b.finish());
        }
        Source::new(&periods)
    }

    #[test]
    fn a_period_is_the_same_whatever_was_made_before() {
        let fleet = Fleet::new(source(), 10, Shape::default());
        let (mut a, mut b) = (fleet.profile(), fleet.profile());
        fleet.period(&fleet.hosts()[3], 7, 420, &mut a);
        fleet.period(&fleet.hosts()[2], 1, 60, &mut b);
        fleet.period(&fleet.hosts()[3], 7, 420, &mut b);
        assert_eq!(a, b);
        assert!(a.samples() > 0);
        assert!(a.processes.iter().all(|p| p.host == "fleet-003"));
    }

    #[test]
    fn hosts_differ_in_processes_pids_and_stacks_and_share_most_stacks() {
        let fleet = Fleet::new(source(), 50, Shape::default());
        let mut p = fleet.profile();
        let mut names = std::collections::HashSet::new();
        let mut pids = std::collections::HashSet::new();
        let mut per_host: Vec<std::collections::HashSet<Vec<String>>> = Vec::new();
        for h in fleet.hosts() {
            fleet.period(h, 0, 0, &mut p);
            let mut mine: Vec<&str> = p.processes.iter().map(|p| p.name.as_str()).collect();
            mine.sort_unstable();
            mine.dedup();
            names.insert(mine.join(","));
            pids.extend(p.processes.iter().map(|p| p.pid));
            per_host.push(
                p.stacks
                    .iter()
                    .map(|s| {
                        s.frames
                            .iter()
                            .map(|&f| p.functions[f as usize].name.clone())
                            .collect()
                    })
                    .collect(),
            );
        }
        // Several process mixes, and pids of their own.
        assert!(names.len() >= 3, "{names:?}");
        assert!(pids.len() > 100, "{}", pids.len());
        // A stack seen on one host is seen on others, and not every host
        // runs the same set.
        let all: std::collections::HashSet<&Vec<String>> = per_host.iter().flatten().collect();
        let shared = all
            .iter()
            .filter(|s| per_host.iter().filter(|h| h.contains(**s)).count() > 1)
            .count();
        assert!(shared * 2 > all.len(), "{shared} of {}", all.len());
        assert!(per_host.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn samples_follow_the_source_scaled_by_the_load() {
        let src = source();
        let per_period = src.samples_per_period();
        let fleet = Fleet::new(
            src,
            200,
            Shape {
                mix: 1.0,
                ..Shape::default()
            },
        );
        let mut p = fleet.profile();
        let mut total = 0u64;
        for h in fleet.hosts() {
            fleet.period(h, 0, 0, &mut p);
            total += p.samples();
        }
        // Load 0.3 to 1.0 (0.65 on average) times hot factors of mean
        // e^0.32 = 1.38 (log-normal, σ 0.8): about 0.9 of the source.
        let mean = total as f64 / 200.0;
        assert!(
            mean > per_period * 0.25 && mean < per_period * 1.2,
            "{mean} against {per_period}"
        );
    }
}
