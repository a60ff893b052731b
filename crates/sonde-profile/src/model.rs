//! The profile every view reads: symbolised stacks with their sample
//! counts, per process.
//!
//! A [`Profile`] is what a collection produces once its stacks are
//! symbolised, what a pprof file decodes to, and what the store keeps per
//! minute. Functions and processes are interned: a [`Stack`] holds indices
//! into [`Profile::functions`] and [`Profile::processes`], so a profile of
//! a busy host stays a few thousand small entries whatever its sample
//! count. Build one with [`ProfileBuilder`], which merges equal stacks.

use std::hash::BuildHasher;

use hashbrown::{HashMap, HashTable};

/// A symbolised frame: a function and the module (file) it lives in.
///
/// Frames that could not be named carry the address in `name`, as
/// `0x1f2e3` (an offset into the module) so that they still group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Function {
    /// The demangled function name.
    pub name: String,
    /// The module's path as the process saw it (`[kernel]` for the
    /// kernel, `[jit]` for code from a perf map without a file).
    pub module: String,
}

/// Where a stack was sampled: the host, the process and the thread in it.
///
/// Each thread of a process is a `Process` of its own in a profile, so a
/// view can filter or group by thread; views that speak of processes
/// group by `(host, pid)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Process {
    /// The process id (the thread group id).
    pub pid: u32,
    /// The process's command name (`comm`, at most 15 bytes), as of its
    /// last `exec`.
    pub name: String,
    /// The id of the container the process runs in, from its cgroup
    /// (see [`crate::cgroup::container_of_cgroup`]); empty outside one.
    pub container: String,
    /// The uid of the Kubernetes pod the container belongs to, from its
    /// cgroup (see [`crate::cgroup::pod_of_cgroup`]); empty outside one.
    pub pod: String,
    /// The thread id (0 when the producer did not say).
    pub tid: u32,
    /// The thread's name (`/proc/PID/task/TID/comm`, as the thread last
    /// set it); empty when the producer did not say.
    pub thread: String,
    /// The host the profile was taken on (the agent's `agent.hostname`);
    /// empty when the producer did not say.
    pub host: String,
}

/// A distinct stack in one process and the samples it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Index into [`Profile::processes`].
    pub process: u32,
    /// Indices into [`Profile::functions`], root (the entry point) first,
    /// the sampled function (the leaf) last. Never empty.
    pub frames: Vec<u32>,
    /// How many samples had exactly this stack in this process.
    pub count: u64,
}

/// Aggregated, symbolised stacks over one period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    /// Interned functions.
    pub functions: Vec<Function>,
    /// Interned processes.
    pub processes: Vec<Process>,
    /// Distinct (process, stack) pairs with their counts.
    pub stacks: Vec<Stack>,
    /// Samples per second per CPU the period was sampled at.
    pub frequency: u32,
    /// When the period started, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// How long the period lasted, in nanoseconds.
    pub duration_ns: u64,
}

impl Profile {
    /// The number of samples in the profile (idle samples are never in
    /// one).
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }

    /// The CPU time one sample stands for, in seconds: `1 / frequency`.
    pub fn seconds_per_sample(&self) -> f64 {
        if self.frequency == 0 {
            0.0
        } else {
            1.0 / f64::from(self.frequency)
        }
    }

    /// The function a frame index names.
    pub fn function(&self, index: u32) -> &Function {
        &self.functions[index as usize]
    }

    /// A profile with only the stacks of the processes `keep` accepts
    /// (functions and processes re-interned, so nothing unused remains).
    pub fn filter(&self, keep: impl FnMut(&Process) -> bool) -> Profile {
        let mut out = ProfileBuilder::new(self.frequency, self.start_ns, self.duration_ns);
        // Asked once per process, not per stack.
        let kept: Vec<bool> = self.processes.iter().map(keep).collect();
        for stack in &self.stacks {
            let process = &self.processes[stack.process as usize];
            if kept[stack.process as usize] {
                out.add(
                    process,
                    stack.frames.iter().map(|&f| self.function(f)),
                    stack.count,
                );
            }
        }
        out.finish()
    }

    /// The stacks through the function named `name`, seen from it: with
    /// [`Focus::Callees`] each is cut to start at the function (what it
    /// calls, and where its time goes), with [`Focus::Callers`] each runs
    /// from the function out to the stack's root (who calls it). The
    /// outermost occurrence counts where the function recurses. Stacks
    /// without it are left out, so shares are of the function's samples.
    pub fn focus(&self, name: &str, focus: Focus) -> Profile {
        let mut out = ProfileBuilder::new(self.frequency, self.start_ns, self.duration_ns);
        for stack in &self.stacks {
            let Some(at) = stack
                .frames
                .iter()
                .position(|&f| self.function(f).name == name)
            else {
                continue;
            };
            let process = &self.processes[stack.process as usize];
            let frames = stack.frames.iter().map(|&f| self.function(f));
            match focus {
                Focus::Callees => out.add(process, frames.skip(at), stack.count),
                Focus::Callers => {
                    let callers: Vec<&Function> = frames.take(at + 1).collect();
                    out.add(process, callers.into_iter().rev(), stack.count);
                }
            }
        }
        out.finish()
    }

    /// The profile with a frame per root in `roots` (outermost first)
    /// under every stack: `[Root::Process, Root::Thread]` roots each stack
    /// at its process, then its thread, which is how a flame graph, folded
    /// stacks or a top table split by where the samples ran.
    pub fn rooted(&self, roots: &[Root]) -> Profile {
        let mut out = ProfileBuilder::new(self.frequency, self.start_ns, self.duration_ns);
        let prefixes: Vec<Vec<u32>> = self
            .processes
            .iter()
            .map(|p| {
                roots
                    .iter()
                    .map(|r| {
                        out.function(&Function {
                            name: r.label(p),
                            module: r.module().to_owned(),
                        })
                    })
                    .collect()
            })
            .collect();
        let functions: Vec<u32> = self.functions.iter().map(|f| out.function(f)).collect();
        let processes: Vec<u32> = self.processes.iter().map(|p| out.process(p)).collect();
        let mut frames = Vec::new();
        for stack in &self.stacks {
            frames.clear();
            frames.extend(&prefixes[stack.process as usize]);
            frames.extend(stack.frames.iter().map(|&f| functions[f as usize]));
            out.add_interned(processes[stack.process as usize], &frames, stack.count);
        }
        out.finish()
    }

    /// The samples of each host, sorted by name.
    pub fn hosts(&self) -> Vec<HostSamples> {
        let mut by_host: std::collections::BTreeMap<&str, u64> = Default::default();
        for stack in &self.stacks {
            *by_host
                .entry(&self.processes[stack.process as usize].host)
                .or_default() += stack.count;
        }
        by_host
            .into_iter()
            .map(|(host, samples)| HostSamples {
                host: host.to_owned(),
                samples,
            })
            .collect()
    }

    /// Adds every stack of `other` to this profile, widening the period to
    /// cover both.
    pub fn merge(self, other: &Profile) -> Profile {
        let start = match (self.duration_ns, other.duration_ns) {
            (0, _) => other.start_ns,
            (_, 0) => self.start_ns,
            _ => self.start_ns.min(other.start_ns),
        };
        let end = (self.start_ns + self.duration_ns).max(other.start_ns + other.duration_ns);
        let frequency = if self.frequency == 0 {
            other.frequency
        } else {
            self.frequency
        };
        let mut out = ProfileBuilder::from_profile(self);
        out.frequency = frequency;
        out.start_ns = start;
        out.duration_ns = end.saturating_sub(start);
        for stack in &other.stacks {
            out.add(
                &other.processes[stack.process as usize],
                stack.frames.iter().map(|&f| other.function(f)),
                stack.count,
            );
        }
        out.finish()
    }
}

/// A frame [`Profile::rooted`] puts under every stack, naming where it
/// was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Root {
    /// The host: its name.
    Host,
    /// The process: `name (pid)`.
    Process,
    /// The thread: its name, so a pool's threads of one name read as one.
    Thread,
}

impl Root {
    /// The module the frames of this kind carry, which is how renderers
    /// tell them from functions.
    pub fn module(self) -> &'static str {
        match self {
            Root::Host => "[host]",
            Root::Process => "[process]",
            Root::Thread => "[thread]",
        }
    }

    /// The frame's name for a stack of `p`.
    pub fn label(self, p: &Process) -> String {
        let or = |s: &str, unknown: &str| {
            if s.is_empty() {
                unknown.to_owned()
            } else {
                s.to_owned()
            }
        };
        match self {
            Root::Host => or(&p.host, "[unknown host]"),
            Root::Process => format!("{} ({})", p.name, p.pid),
            Root::Thread => or(&p.thread, "[unknown thread]"),
        }
    }
}

impl std::str::FromStr for Root {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(Root::Host),
            "process" => Ok(Root::Process),
            "thread" => Ok(Root::Thread),
            _ => Err(format!("{s:?}: expected host, process or thread")),
        }
    }
}

/// Parses `process,thread`: roots in order, outermost first, each at most
/// once.
pub fn parse_roots(s: &str) -> Result<Vec<Root>, String> {
    let mut roots: Vec<Root> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let root: Root = part.parse()?;
        if roots.contains(&root) {
            return Err(format!("{part:?} is given twice"));
        }
        roots.push(root);
    }
    Ok(roots)
}

/// Samples per host (the empty name for a producer that did not say),
/// sorted by host name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostSamples {
    /// The host's name.
    pub host: String,
    /// Its samples in the profile.
    pub samples: u64,
}

/// Which side of a function [`Profile::focus`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// What the function calls.
    Callees,
    /// What calls the function.
    Callers,
}

/// Builds a [`Profile`], interning functions and processes and merging
/// equal stacks.
#[derive(Debug, Default)]
pub struct ProfileBuilder {
    functions: HashMap<Function, u32>,
    processes: HashMap<Process, u32>,
    stacks: HashTable<usize>,
    entries: Vec<Stack>,
    hasher: foldhash::fast::RandomState,
    profile: Profile,
    frames: Vec<u32>,
    /// Samples per second per CPU.
    pub frequency: u32,
    /// Start of the period, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// Length of the period in nanoseconds.
    pub duration_ns: u64,
}

impl ProfileBuilder {
    /// An empty builder for a period.
    pub fn new(frequency: u32, start_ns: u64, duration_ns: u64) -> Self {
        ProfileBuilder {
            frequency,
            start_ns,
            duration_ns,
            ..Default::default()
        }
    }

    /// A builder that starts from everything in `profile`.
    pub fn from_profile(profile: Profile) -> Self {
        let mut out = ProfileBuilder::new(profile.frequency, profile.start_ns, profile.duration_ns);
        for stack in &profile.stacks {
            out.add(
                &profile.processes[stack.process as usize],
                stack.frames.iter().map(|&f| profile.function(f)),
                stack.count,
            );
        }
        out
    }

    /// Interns a function and returns its index.
    pub fn function(&mut self, function: &Function) -> u32 {
        if let Some(&i) = self.functions.get(function) {
            return i;
        }
        let i = self.profile.functions.len() as u32;
        self.profile.functions.push(function.clone());
        self.functions.insert(function.clone(), i);
        i
    }

    /// Interns a process and returns its index.
    pub fn process(&mut self, process: &Process) -> u32 {
        if let Some(&i) = self.processes.get(process) {
            return i;
        }
        let i = self.profile.processes.len() as u32;
        self.profile.processes.push(process.clone());
        self.processes.insert(process.clone(), i);
        i
    }

    /// Adds `count` samples of a stack given root first. An empty stack is
    /// ignored.
    pub fn add<'a>(
        &mut self,
        process: &Process,
        frames_root_first: impl IntoIterator<Item = &'a Function>,
        count: u64,
    ) {
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        for f in frames_root_first {
            let i = self.function(f);
            frames.push(i);
        }
        if !frames.is_empty() && count > 0 {
            let p = self.process(process);
            self.add_interned(p, &frames, count);
        }
        self.frames = frames;
    }

    /// Adds `count` samples of a stack of already interned indices, root
    /// first.
    pub fn add_interned(&mut self, process: u32, frames_root_first: &[u32], count: u64) {
        if frames_root_first.is_empty() || count == 0 {
            return;
        }
        // Looked up by borrowed key, so a stack seen before allocates nothing.
        let hash = self.hasher.hash_one((process, frames_root_first));
        let entries = &self.entries;
        match self.stacks.find(hash, |&i| {
            let s: &Stack = &entries[i];
            s.process == process && s.frames == frames_root_first
        }) {
            Some(&i) => self.entries[i].count += count,
            None => {
                let i = self.entries.len();
                self.entries.push(Stack {
                    process,
                    frames: frames_root_first.to_vec(),
                    count,
                });
                let (entries, hasher) = (&self.entries, &self.hasher);
                self.stacks.insert_unique(hash, i, |&j| {
                    hasher.hash_one((entries[j].process, entries[j].frames.as_slice()))
                });
            }
        }
    }

    /// The profile, stacks in a stable order (by process, then frames).
    pub fn finish(self) -> Profile {
        let mut profile = self.profile;
        profile.frequency = self.frequency;
        profile.start_ns = self.start_ns;
        profile.duration_ns = self.duration_ns;
        let mut stacks = self.entries;
        stacks.sort_by(|a, b| (a.process, &a.frames).cmp(&(b.process, &b.frames)));
        profile.stacks = stacks;
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> Function {
        Function {
            name: name.into(),
            module: "/bin/app".into(),
        }
    }

    /// Root-first stacks of one process as `a;b;c count` lines, sorted.
    fn folded(p: &Profile) -> Vec<String> {
        let mut lines: Vec<String> = p
            .stacks
            .iter()
            .map(|s| {
                let names: Vec<&str> = s
                    .frames
                    .iter()
                    .map(|&i| p.function(i).name.as_str())
                    .collect();
                format!("{} {}", names.join(";"), s.count)
            })
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn rooted_stacks_start_at_their_host_process_and_thread() {
        let mut b = ProfileBuilder::new(19, 0, 1);
        let at = |host: &str, pid, tid, thread: &str| Process {
            pid,
            name: "app".into(),
            tid,
            thread: thread.into(),
            host: host.into(),
            ..Default::default()
        };
        b.add(&at("a", 1, 1, "app"), &[f("main"), f("serve")], 2);
        b.add(&at("a", 1, 2, "worker"), &[f("run"), f("hash")], 3);
        b.add(&at("a", 1, 3, "worker"), &[f("run"), f("hash")], 4);
        b.add(&at("b", 1, 1, ""), &[f("main")], 5);
        let profile = b.finish();
        assert_eq!(
            folded(&profile.rooted(&[Root::Process, Root::Thread])),
            [
                "app (1);[unknown thread];main 5",
                "app (1);app;main;serve 2",
                "app (1);worker;run;hash 3",
                "app (1);worker;run;hash 4",
            ]
        );
        let by_host = profile.rooted(&[Root::Host]);
        assert_eq!(by_host.samples(), profile.samples());
        assert!(by_host
            .functions
            .iter()
            .filter(|f| f.name == "a" || f.name == "b")
            .all(|f| f.module == "[host]"));
        assert_eq!(
            profile.hosts(),
            [
                HostSamples {
                    host: "a".into(),
                    samples: 9
                },
                HostSamples {
                    host: "b".into(),
                    samples: 5
                }
            ]
        );
        assert_eq!(
            parse_roots("process, thread"),
            Ok(vec![Root::Process, Root::Thread])
        );
        assert!(parse_roots("process,process").is_err());
        assert!(parse_roots("pod")
            .unwrap_err()
            .contains("host, process or thread"));
    }

    #[test]
    fn focus_shows_a_functions_callees_and_callers_from_its_outermost_call() {
        let mut b = ProfileBuilder::new(19, 0, 1);
        let p = Process {
            pid: 1,
            name: "app".into(),
            container: String::new(),
            ..Default::default()
        };
        b.add(&p, &[f("main"), f("serve"), f("parse"), f("alloc")], 5);
        b.add(
            &p,
            &[f("main"), f("batch"), f("parse"), f("parse"), f("memcpy")],
            3,
        );
        b.add(&p, &[f("main"), f("idle")], 7);
        let profile = b.finish();
        assert_eq!(
            folded(&profile.focus("parse", Focus::Callees)),
            ["parse;alloc 5", "parse;parse;memcpy 3"]
        );
        assert_eq!(
            folded(&profile.focus("parse", Focus::Callers)),
            ["parse;batch;main 3", "parse;serve;main 5"]
        );
        assert_eq!(profile.focus("nothing", Focus::Callers).samples(), 0);
    }
}
