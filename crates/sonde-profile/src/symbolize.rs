//! Naming raw frames: ELF symbols and DWARF through blazesym, the kernel
//! through `/proc/kallsyms`, JIT code through the process's perf map.
//!
//! [`Symbols`] caches every name by (module, file offset), so a frame
//! seen in every minute's profile is looked up once. Lookups are batched
//! per module, sorted, as blazesym prefers, and what blazesym reads for a
//! module (its mapping of the file, the symbol table's index, DWARF and
//! separate debug files) is dropped once that module's batch is named:
//! only frames not seen before are looked up, so a module's symbols are
//! read again only in a period that meets new code in it.
//!
//! The cache is bounded by what the host runs now, not by what it ever
//! ran: [`Symbols::forget`] drops the names of a module no process maps
//! any more, and names from perf maps are looked up again each profile (a
//! JIT moves and reuses its code, and its map grows).

use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use hashbrown::HashMap;

use crate::collect::{ProcessKey, RawFrame};
use crate::model::{Function, Process, Profile, ProfileBuilder};
use crate::module::Modules;

/// The module name of kernel frames.
pub const KERNEL: &str = "[kernel]";
/// The module name of JIT frames named from a perf map.
pub const JIT: &str = "[jit]";
/// The name of a frame that could not be named, in code of no module
/// (JIT code without a perf map).
pub const UNKNOWN: &str = "[unknown]";

/// The name of the code of `module` that could not be named and whose
/// function is not known either: `[unknown in libfoo.so]`, `[unknown in
/// kernel]` (kernel code without `cap_syslog`). A stripped binary's
/// functions are named by [`unnamed_function`] instead, where its unwind
/// tables place them.
///
/// # Design
///
/// One name per module, not one per address: a module's thousands of
/// sampled addresses would each take a row of a few samples, burying the
/// fact that the module as a whole takes 40%.
pub fn unknown_in(module: &str) -> String {
    match short_name(module) {
        Some(name) => format!("[unknown in {name}]"),
        None => UNKNOWN.to_string(),
    }
}

/// The name of a stripped module's function that starts at `start` (its
/// virtual address, as `nm` and `addr2line` take it): `cc1+0x4f00`. A
/// function of a stripped binary is one row of the top table and one box
/// of the flame graph, as a named one is, and the address names it once
/// debug symbols are at hand (`addr2line -f -e cc1.debug 0x4f00`).
pub fn unnamed_function(module: &str, start: u64) -> String {
    format!("{}+{start:#x}", short_name(module).unwrap_or("?"))
}

/// A module's name without its directory or brackets: `cc1`, `kernel`.
fn short_name(module: &str) -> Option<&str> {
    if module.is_empty() || module == UNKNOWN {
        return None;
    }
    Some(
        match module.strip_prefix('[').and_then(|m| m.strip_suffix(']')) {
            Some(bracketed) => bracketed,
            None => module.rsplit('/').next().unwrap_or(module),
        },
    )
}

/// Whether a function name is one of [`unknown_in`]'s (or [`UNKNOWN`]).
pub fn is_unknown(name: &str) -> bool {
    name == UNKNOWN || (name.starts_with("[unknown in ") && name.ends_with(']'))
}

/// Counters of the symbol cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Frames named from the cache.
    pub hits: u64,
    /// Frames that had to be looked up.
    pub misses: u64,
}

/// How long blazesym's data for the files it read (mappings, symbol
/// indexes, DWARF, debug files) may be kept between periods: with the
/// default 60 s periods, not past a module's batch; with shorter ones, a
/// module read in each period is read again at most once this long (its
/// symbol table sorted again: `librustc_driver`'s and `libLLVM`'s take
/// seconds in a debug build, more than a 1 s period).
const FILES_HELD_FOR: std::time::Duration = std::time::Duration::from_secs(55);

/// A perf map: sorted (start, end, name).
type PerfMap = Vec<(u64, u64, String)>;

/// Names frames, remembering every answer.
pub struct Symbols {
    /// For the kernel: `/proc/kallsyms`, parsed once and kept (the same
    /// for the agent's life).
    kernel: Symbolizer,
    /// For files, between the times their data is let go (see
    /// [`Symbols::lookup_elf`]).
    files: Symbolizer,
    /// When `files` was last let go; `None` before the first profile.
    files_since: Option<std::time::Instant>,
    names: HashMap<RawFrame, u32>,
    functions: Vec<Function>,
    by_function: HashMap<Function, u32>,
    perf_maps: HashMap<u32, Option<PerfMap>>,
    stats: CacheStats,
}

impl Default for Symbols {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbols {
    /// An empty cache.
    pub fn new() -> Self {
        Symbols {
            kernel: symbolizer(),
            files: symbolizer(),
            files_since: None,
            names: HashMap::new(),
            functions: Vec::new(),
            by_function: HashMap::new(),
            perf_maps: HashMap::new(),
            stats: CacheStats::default(),
        }
    }

    /// Cache hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// How many frames have a cached name.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no name is cached.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Forgets the names of dropped modules (see
    /// [`crate::module::Modules::retain`]), whose indices may be reused.
    pub fn forget(&mut self, dropped: &[(u32, Option<PathBuf>)]) {
        if dropped.is_empty() {
            return;
        }
        let gone: hashbrown::HashSet<u32> = dropped.iter().map(|d| d.0).collect();
        self.names
            .retain(|f, _| !matches!(f, RawFrame::Module(m, _) if gone.contains(m)));
        self.compact();
    }

    /// Rebuilds the function table once most of its entries are no
    /// longer named by any cached frame, so it shrinks with the cache.
    fn compact(&mut self) {
        let mut used = vec![false; self.functions.len()];
        for &i in self.names.values() {
            if let Some(u) = used.get_mut(i as usize) {
                *u = true;
            }
        }
        let live = used.iter().filter(|&&u| u).count();
        if live * 2 >= self.functions.len() {
            return;
        }
        let mut remap = vec![u32::MAX; self.functions.len()];
        let old = std::mem::take(&mut self.functions);
        self.by_function.clear();
        for (i, f) in old.into_iter().enumerate() {
            if used[i] {
                remap[i] = self.functions.len() as u32;
                self.by_function.insert(f.clone(), remap[i]);
                self.functions.push(f);
            }
        }
        for i in self.names.values_mut() {
            if let Some(&r) = remap.get(*i as usize) {
                *i = r;
            }
        }
    }

    fn intern(&mut self, f: Function) -> u32 {
        if let Some(&i) = self.by_function.get(&f) {
            return i;
        }
        let i = self.functions.len() as u32;
        self.functions.push(f.clone());
        self.by_function.insert(f, i);
        i
    }

    /// Names every frame of `stacks` not named before, calling `between`
    /// after each module's lookups.
    fn resolve<'a>(
        &mut self,
        modules: &Modules,
        frames: impl Iterator<Item = &'a RawFrame>,
        between: &mut dyn FnMut(),
    ) {
        // Let go of what blazesym holds of files at most once a minute:
        // then each module's batch reads its file afresh and lets it go.
        let hold = self
            .files_since
            .is_some_and(|t| t.elapsed() < FILES_HELD_FOR);
        if !hold {
            self.files = symbolizer();
            self.files_since = Some(std::time::Instant::now());
        }
        let mut by_module: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut kernel = Vec::new();
        let mut anon = Vec::new();
        for f in frames {
            if self.names.contains_key(f) {
                self.stats.hits += 1;
                continue;
            }
            self.stats.misses += 1;
            match *f {
                RawFrame::Module(m, off) => by_module.entry(m).or_default().push(off),
                RawFrame::Kernel(a) => kernel.push(a),
                RawFrame::Anon(pid, a) => anon.push((pid, a)),
            }
            // Placeholder so a frame repeated in this batch counts once.
            self.names.insert(*f, u32::MAX);
        }
        for (m, mut offsets) in by_module {
            offsets.sort_unstable();
            let module = modules.get(m);
            let names = match module.open_path() {
                Some(path) => self.lookup_elf(path, &offsets, hold),
                None => offsets
                    .iter()
                    .map(|&o| module.symbol_at(o).map(str::to_string))
                    .collect(),
            };
            for (off, name) in offsets.into_iter().zip(names) {
                let name = name.unwrap_or_else(|| match module.function_start(off) {
                    Some(start) => unnamed_function(&module.path, start),
                    None => unknown_in(&module.path),
                });
                let f = Function {
                    name,
                    module: module.path.clone(),
                };
                let i = self.intern(f);
                self.names.insert(RawFrame::Module(m, off), i);
            }
            between();
        }
        if !kernel.is_empty() {
            kernel.sort_unstable();
            let src = Source::Kernel(Kernel {
                // Without vmlinux, kallsyms alone; no debug info wanted.
                vmlinux: blazesym::MaybeDefault::None,
                debug_syms: false,
                ..Kernel::default()
            });
            let names = lookup(&self.kernel, &src, Input::AbsAddr(&kernel));
            for (a, name) in kernel.into_iter().zip(names) {
                let f = Function {
                    name: name.unwrap_or_else(|| unknown_in(KERNEL)),
                    module: KERNEL.to_string(),
                };
                let i = self.intern(f);
                self.names.insert(RawFrame::Kernel(a), i);
            }
            between();
        }
        for (pid, a) in anon {
            let name = self.perf_map(pid).and_then(|map| {
                let i = map.partition_point(|e| e.0 <= a).checked_sub(1)?;
                let (start, end, name) = &map[i];
                (a >= *start && a < *end).then(|| name.clone())
            });
            let f = match name {
                Some(name) => Function {
                    name,
                    module: JIT.to_string(),
                },
                None => Function {
                    name: UNKNOWN.to_string(),
                    module: UNKNOWN.to_string(),
                },
            };
            let i = self.intern(f);
            self.names.insert(RawFrame::Anon(pid, a), i);
        }
    }

    /// Names file offsets of an ELF file from its symbol tables, then,
    /// for the offsets they leave unnamed (glibc's static functions, say),
    /// from DWARF and separate debug files (/usr/lib/debug, by build id
    /// or debug link). DWARF is read only for those: parsing a large
    /// binary's debug info costs tens of MiB (the agent's own, built with
    /// debug info, took 22 MiB of heap and 28 MiB of mapped file when
    /// every lookup went through DWARF; docs/BENCHMARKS.md, "The
    /// profiler").
    ///
    /// # Design
    ///
    /// With `hold` false, a symbolizer for this batch alone, dropped at
    /// the end; with `hold`, the one kept until the next period that lets
    /// go (see [`FILES_HELD_FOR`]): blazesym
    /// keeps every file it read mapped, with its symbol table's index
    /// (and DWARF and debug files) in the heap, for as long as its
    /// symbolizer lives, and the symbol table pages it touched count in
    /// the agent's RSS. Kept for the agent's life, on a host running a
    /// Rust build (rustc's `librustc_driver` and `libLLVM`, 150 and
    /// 200 MB, whose symbol tables alone are 4 and 6 MB) the agent
    /// peaked at 152 MiB, and at 50 MiB with this and
    /// [`crate::module::Module::release_pages`]. The price: a module's
    /// symbol table is read and sorted again in each period that meets
    /// code of it not named before (docs/BENCHMARKS.md, "The profiler"),
    /// which is why it happens at most once every [`FILES_HELD_FOR`].
    fn lookup_elf(&self, path: PathBuf, offsets: &[u64], hold: bool) -> Vec<Option<String>> {
        let batch;
        let symbolizer = if hold {
            &self.files
        } else {
            batch = symbolizer();
            &batch
        };
        let mut elf = Elf::new(path);
        elf.debug_syms = false;
        let mut names = lookup(
            symbolizer,
            &Source::Elf(elf.clone()),
            Input::FileOffset(offsets),
        );
        let unnamed: Vec<u64> = offsets
            .iter()
            .zip(&names)
            .filter(|(_, n)| n.is_none())
            .map(|(&o, _)| o)
            .collect();
        if unnamed.is_empty() {
            return names;
        }
        elf.debug_syms = true;
        let mut found =
            lookup(symbolizer, &Source::Elf(elf), Input::FileOffset(&unnamed)).into_iter();
        for name in names.iter_mut().filter(|n| n.is_none()) {
            *name = found.next().flatten();
        }
        names
    }

    /// The perf map a JIT writes for `pid` (`/tmp/perf-PID.map` in the
    /// process's own mount and pid namespaces), read once per profile.
    fn perf_map(&mut self, pid: u32) -> Option<&PerfMap> {
        self.perf_maps
            .entry(pid)
            .or_insert_with(|| read_perf_map(pid))
            .as_ref()
    }

    /// Symbolises raw stacks into a profile.
    pub fn profile(
        &mut self,
        modules: &Modules,
        stacks: &HashMap<(ProcessKey, Vec<RawFrame>), u64>,
        frequency: u32,
        start_ns: u64,
        duration_ns: u64,
    ) -> Profile {
        self.profile_between(
            modules,
            stacks,
            frequency,
            start_ns,
            duration_ns,
            &mut || {},
        )
    }

    /// [`Symbols::profile`], calling `between` after each module's
    /// lookups (reading a large module's symbols for the first time takes
    /// a good part of a second): a profiler drains its rings there, so
    /// that they do not overflow while it symbolises.
    pub fn profile_between(
        &mut self,
        modules: &Modules,
        stacks: &HashMap<(ProcessKey, Vec<RawFrame>), u64>,
        frequency: u32,
        start_ns: u64,
        duration_ns: u64,
        between: &mut dyn FnMut(),
    ) -> Profile {
        // Perf maps grow as a JIT compiles and JIT code moves: read them
        // again, and name JIT frames afresh, each profile.
        self.perf_maps.clear();
        self.names.retain(|f, _| !matches!(f, RawFrame::Anon(..)));
        self.compact();
        self.resolve(modules, stacks.keys().flat_map(|(_, f)| f.iter()), between);
        let mut out = ProfileBuilder::new(frequency, start_ns, duration_ns);
        let mut frames = Vec::new();
        for ((process, raw), &count) in stacks {
            frames.clear();
            let mut last = u32::MAX;
            for f in raw {
                let i = self.names.get(f).copied().unwrap_or(u32::MAX);
                // A run of a module's unnamed frames is one frame: each
                // would carry the same name, and a stripped binary's calls
                // within itself would stack identical boxes in the flame
                // graph, telling nothing but making it deeper.
                if i == last
                    && self
                        .functions
                        .get(i as usize)
                        .is_some_and(|f| is_unknown(&f.name))
                {
                    continue;
                }
                last = i;
                if let Some(function) = self.functions.get(i as usize) {
                    frames.push(out.function(function));
                }
            }
            let p = out.process(&Process {
                pid: process.pid,
                name: process.name.clone(),
                container: process.container.as_deref().unwrap_or("").to_string(),
                pod: process.pod.as_deref().unwrap_or("").to_string(),
                tid: process.tid,
                thread: process.thread.clone(),
                host: String::new(),
            });
            out.add_interned(p, &frames, count);
        }
        out.finish()
    }
}

/// A symbolizer that names functions only: code info (file and line) is
/// not shown by any view, and reading the line tables costs memory.
fn symbolizer() -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(false)
        .enable_demangling(true)
        .build()
}

fn lookup(symbolizer: &Symbolizer, src: &Source<'_>, input: Input<&[u64]>) -> Vec<Option<String>> {
    let n = match input {
        Input::AbsAddr(a) | Input::VirtOffset(a) | Input::FileOffset(a) => a.len(),
    };
    match symbolizer.symbolize(src, input) {
        Ok(syms) => syms
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(sym.name.into_owned()),
                Symbolized::Unknown(_) => None,
            })
            .collect(),
        Err(_) => vec![None; n],
    }
}

fn read_perf_map(pid: u32) -> Option<PerfMap> {
    // In a pid namespace the JIT names the file with its own pid, the last
    // on the NSpid line.
    let ns_pid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_ascii_whitespace().last().map(str::to_string))
        })
        .unwrap_or_else(|| pid.to_string());
    let candidates = [
        PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map")),
        PathBuf::from(format!("/tmp/perf-{pid}.map")),
    ];
    let text = candidates
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())?;
    let mut map = parse_perf_map(&text);
    map.sort_unstable_by_key(|e| e.0);
    Some(map)
}

/// Lines of `START SIZE name`, START and SIZE in hex with or without `0x`.
pub(crate) fn parse_perf_map(text: &str) -> PerfMap {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = hex(parts.next()?)?;
            let size = hex(parts.next()?)?;
            let name = parts.next()?.trim();
            Some((start, start.checked_add(size)?, name.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perf_map_reads_with_and_without_0x_and_skips_bad_lines() {
        let map = parse_perf_map(
            "7f00 20 Interpreter\n0x7f40 0x10 LFoo;::bar (compiled)\nnot a line\n7f80 zz x\n",
        );
        assert_eq!(
            map,
            vec![
                (0x7f00, 0x7f20, "Interpreter".to_string()),
                (0x7f40, 0x7f50, "LFoo;::bar (compiled)".to_string()),
            ]
        );
    }

    /// This test binary as a module, its path, and this process.
    fn this_test() -> (String, Modules, u32, ProcessKey) {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap().to_string();
        let mut modules = Modules::default();
        let m = modules.get_or_load(
            crate::module::Key::Path(exe.clone()),
            &exe,
            std::process::id(),
        );
        let process = ProcessKey {
            pid: std::process::id(),
            name: "demo".into(),
            container: None,
            pod: None,
            tid: std::process::id(),
            thread: "demo".into(),
        };
        (exe, modules, m, process)
    }

    #[test]
    fn names_of_dropped_modules_are_forgotten_and_jit_frames_looked_up_each_profile() {
        let (_, mut modules, m, process) = this_test();
        let stacks: HashMap<_, _> = [(
            (
                process,
                vec![RawFrame::Module(m, 0x1000), RawFrame::Anon(1, 0x7f00)],
            ),
            1,
        )]
        .into();
        let mut symbols = Symbols::new();
        for _ in 0..2 {
            let p = symbols.profile(&modules, &stacks, 19, 0, 1);
            assert_eq!(p.samples(), 1);
        }
        // The module's frame was looked up once, the JIT frame each time.
        assert_eq!(symbols.stats(), CacheStats { hits: 1, misses: 3 });
        assert_eq!(symbols.len(), 2);
        let dropped = modules.retain(|_| false);
        assert_eq!(dropped.len(), 1);
        symbols.forget(&dropped);
        assert_eq!(symbols.len(), 1, "only the JIT frame is left");
        // The function table is rebuilt once less than half of it is
        // named by a cached frame.
        let named: hashbrown::HashSet<u32> = symbols.names.values().copied().collect();
        assert!(
            symbols.functions.len() <= 2 * named.len(),
            "the function table did not shrink with the cache: {:?}",
            symbols.functions
        );
    }

    #[test]
    fn unnamed_code_is_named_after_its_module() {
        assert_eq!(
            unknown_in("/usr/lib/gcc/x86_64-linux-gnu/14/cc1"),
            "[unknown in cc1]"
        );
        assert_eq!(
            unknown_in("/usr/lib/libfoo.so.1"),
            "[unknown in libfoo.so.1]"
        );
        assert_eq!(unknown_in(KERNEL), "[unknown in kernel]");
        assert_eq!(unknown_in("[vdso]"), "[unknown in vdso]");
        assert_eq!(unknown_in(UNKNOWN), UNKNOWN);
        assert_eq!(unknown_in(""), UNKNOWN);
        for name in ["[unknown in cc1]", UNKNOWN] {
            assert!(is_unknown(name), "{name}");
        }
        for name in [
            "main",
            "[unknown",
            "[kernel]",
            "unknown in cc1",
            "cc1+0x4f00",
        ] {
            assert!(!is_unknown(name), "{name}");
        }
        assert_eq!(
            unnamed_function("/usr/lib/gcc/x86_64-linux-gnu/14/cc1", 0x4f00),
            "cc1+0x4f00"
        );
    }

    #[test]
    fn a_modules_unnamed_frames_share_one_name_and_a_run_of_them_is_one_frame() {
        let (exe, modules, m, process) = this_test();
        let exe = exe.as_str();
        // Offsets past the end of the file, which no symbol covers, as
        // none covers a stripped binary's code.
        const FAR: u64 = 1 << 40;
        let stacks: HashMap<_, _> = [
            (
                (
                    process.clone(),
                    vec![
                        RawFrame::Module(m, FAR + 0x10),
                        RawFrame::Module(m, FAR + 0x20),
                        RawFrame::Module(m, FAR + 0x30),
                    ],
                ),
                3,
            ),
            (
                (
                    process,
                    vec![
                        RawFrame::Module(m, FAR + 0x10),
                        RawFrame::Anon(1, 0x7f00),
                        RawFrame::Module(m, FAR + 0x20),
                    ],
                ),
                1,
            ),
        ]
        .into();
        let p = Symbols::new().profile(&modules, &stacks, 19, 0, 1);
        let name = format!("[unknown in {}]", exe.rsplit('/').next().unwrap());
        let mut shapes: Vec<Vec<(String, String)>> = p
            .stacks
            .iter()
            .map(|s| {
                s.frames
                    .iter()
                    .map(|&f| (p.function(f).name.clone(), p.function(f).module.clone()))
                    .collect()
            })
            .collect();
        shapes.sort();
        let unnamed = (name, exe.to_string());
        let anon = (UNKNOWN.to_string(), UNKNOWN.to_string());
        assert_eq!(
            shapes,
            [
                vec![unnamed.clone()],
                vec![unnamed.clone(), anon, unnamed.clone()],
            ]
        );
    }

    #[test]
    fn compacting_keeps_the_named_functions_and_renumbers_their_frames() {
        let mut symbols = Symbols::new();
        let f = |name: &str| Function {
            name: name.into(),
            module: "m".into(),
        };
        for name in ["a", "b", "c", "d"] {
            symbols.intern(f(name));
        }
        symbols.names.insert(RawFrame::Kernel(1), 2);
        symbols.compact();
        assert_eq!(symbols.functions, vec![f("c")]);
        assert_eq!(symbols.names[&RawFrame::Kernel(1)], 0);
        assert_eq!(symbols.intern(f("c")), 0);
        assert_eq!(symbols.intern(f("a")), 1, "a dropped function is new again");
    }
}
