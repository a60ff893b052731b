//! From records to counted stacks: the process table, unwinding, and the
//! raw (unsymbolised) aggregate.
//!
//! [`Collector::record`] takes the records of [`crate::perf::Events`] in
//! time order. Side-band records keep a table of processes (name,
//! executable mappings, an unwinder over the modules mapped); processes
//! that were running before the profiler started are read from
//! `/proc/PID/maps` when first sampled, and each process's container and
//! pod from its cgroup ([`crate::cgroup`]). A sample becomes a stack of
//! [`RawFrame`]s, kernel part from the kernel's callchain and user part
//! unwound by framehop from the copied registers and stack, and is
//! counted under its process. Symbolising waits until a profile is taken
//! ([`crate::symbolize`]), once per distinct frame.

use std::sync::Arc;

use hashbrown::HashMap;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};

use crate::module::{self, Bytes, Key, Modules};
use crate::record::{
    Mmap, Record, Sample, PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER,
};
use crate::x86::{self, ends_with_call};

pub use crate::cgroup::{container_of_cgroup, pod_of_cgroup};

/// The deepest stack kept; deeper ones keep their 256 innermost frames.
pub const MAX_FRAMES: usize = 256;

/// A frame before symbolisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RawFrame {
    /// A kernel address.
    Kernel(u64),
    /// An offset into a module's file (a return address minus one for
    /// callers, so it falls inside the call).
    Module(u32, u64),
    /// A user address in no file: JIT code (named from the process's perf
    /// map, `/tmp/perf-PID.map`) or code the unwinder could not place.
    Anon(u32, u64),
}

/// The process and thread a raw stack belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessKey {
    /// Process id.
    pub pid: u32,
    /// The command name at the time of the sample.
    pub name: String,
    /// The container the process runs in (see [`container_of_cgroup`]).
    pub container: Option<Arc<str>>,
    /// The Kubernetes pod's uid (see [`pod_of_cgroup`]).
    pub pod: Option<Arc<str>>,
    /// Thread id.
    pub tid: u32,
    /// The thread's name at the time of the sample.
    pub thread: String,
}

/// Counters the views report about the collection itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples of the idle task, dropped.
    pub idle: u64,
    /// Samples counted.
    pub samples: u64,
    /// Samples with a user stack.
    pub user: u64,
    /// Samples whose user stack was unwound to its end (the process's
    /// entry point or the thread's start).
    pub user_complete: u64,
    /// Records the kernel dropped because a ring was full.
    pub lost: u64,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    module: u32,
}

type Unwinder64 = UnwinderX86_64<Bytes>;

#[derive(Clone)]
struct Proc {
    name: String,
    container: Option<Arc<str>>,
    pod: Option<Arc<str>>,
    maps: Vec<Mapping>,
    unwinder: Unwinder64,
    /// Thread names by tid: from comm records, from the creating thread's
    /// name at a thread's fork, or read from /proc when a thread is first
    /// sampled; dropped at the thread's exit.
    threads: HashMap<u32, String>,
}

impl Proc {
    /// A process as of its last exec: its container is read now (a
    /// runtime places a container's first process in its cgroup before
    /// the exec); fork copies it instead.
    fn new(pid: u32, name: String) -> Self {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let container = container_of_cgroup(&cgroup).map(Arc::from);
        let pod = container
            .as_ref()
            .and_then(|_| pod_of_cgroup(&cgroup))
            .map(Arc::from);
        Proc {
            name,
            container,
            pod,
            maps: Vec::new(),
            unwinder: Unwinder64::new(),
            threads: HashMap::new(),
        }
    }

    /// The name of thread `tid` as known; the process's name for a thread
    /// not met yet.
    fn thread_name(&self, tid: u32) -> &str {
        self.threads.get(&tid).map_or(&self.name, String::as_str)
    }

    /// The name of thread `tid`, read from /proc the first time; the
    /// process's name for a thread already gone.
    fn thread(&mut self, pid: u32, tid: u32) -> &str {
        let name = &self.name;
        self.threads.entry(tid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|n| n.trim_end_matches('\n').to_owned())
                .unwrap_or_else(|_| name.clone())
        })
    }

    fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    fn map(&mut self, modules: &Modules, m: Mapping) {
        // A new mapping over an old range replaces it (mmap MAP_FIXED,
        // dlclose then dlopen at the same place).
        let overlapping: Vec<u64> = self
            .maps
            .iter()
            .filter(|o| o.start < m.end && m.start < o.end)
            .map(|o| o.start)
            .collect();
        for start in overlapping {
            self.unwinder.remove_module(start);
        }
        self.maps.retain(|o| !(o.start < m.end && m.start < o.end));
        let i = self.maps.partition_point(|o| o.start < m.start);
        self.maps.insert(i, m);
        let module = modules.get(m.module);
        let base = module.base_avma(m.start, m.pgoff);
        self.unwinder.add_module(framehop::Module::new(
            module.path.clone(),
            m.start..m.end,
            base,
            module::section_info(&module.unwind),
        ));
    }
}

/// The process table and the raw aggregate.
pub struct Collector {
    procs: HashMap<u32, Proc>,
    modules: Modules,
    cache: CacheX86_64,
    stacks: HashMap<(ProcessKey, Vec<RawFrame>), u64>,
    frames: Vec<RawFrame>,
    user_chain: Vec<u64>,
    user: Vec<u64>,
    stats: Stats,
}

impl Default for Collector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Collector {
            procs: HashMap::new(),
            modules: Modules::default(),
            cache: CacheX86_64::new(),
            stacks: HashMap::new(),
            frames: Vec::new(),
            user_chain: Vec::new(),
            user: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// The modules met so far.
    pub fn modules(&self) -> &Modules {
        &self.modules
    }

    /// Counters about the collection since the last [`Collector::take`].
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Adds records the kernel reported lost.
    pub fn add_lost(&mut self, lost: u64) {
        self.stats.lost += lost;
    }

    /// The counted stacks and stats so far, leaving both empty (the
    /// process table and modules stay).
    pub fn take(&mut self) -> (HashMap<(ProcessKey, Vec<RawFrame>), u64>, Stats) {
        (
            std::mem::take(&mut self.stacks),
            std::mem::take(&mut self.stats),
        )
    }

    /// How many processes the table tracks.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// Forgets processes that are gone without an exit record (it was
    /// lost with a full ring) and drops the modules that no process maps
    /// and no counted stack names; returns the dropped modules' indices
    /// and the paths they were read at. Call it once the stacks taken
    /// with [`Collector::take`] are symbolised: their frames may name a
    /// dropped module, whose index a later load reuses.
    pub fn prune(&mut self) -> Vec<(u32, Option<std::path::PathBuf>)> {
        self.procs
            .retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
        for (pid, p) in &mut self.procs {
            p.threads
                .retain(|tid, _| std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists());
        }
        let mut live = hashbrown::HashSet::new();
        for p in self.procs.values() {
            live.extend(p.maps.iter().map(|m| m.module));
        }
        for (_, frames) in self.stacks.keys() {
            live.extend(frames.iter().filter_map(|f| match f {
                RawFrame::Module(m, _) => Some(*m),
                _ => None,
            }));
        }
        self.modules.retain(|i| live.contains(&i))
    }

    /// Applies one record.
    pub fn record(&mut self, record: Record<'_>) {
        match record {
            Record::Sample(s) => self.sample(&s),
            Record::Mmap(m) => self.mmap(&m),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
                ..
            } => {
                let name = String::from_utf8_lossy(name).into_owned();
                if exec {
                    // A new image: the old mappings and threads are gone.
                    let mut p = Proc::new(pid, name.clone());
                    p.threads.insert(tid, name);
                    self.procs.insert(pid, p);
                } else if let Some(p) = self.procs.get_mut(&pid) {
                    // A thread renamed itself (prctl PR_SET_NAME,
                    // pthread_setname_np); the main thread's name is the
                    // process's.
                    if pid == tid {
                        p.name.clone_from(&name);
                    }
                    p.threads.insert(tid, name);
                }
            }
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                ..
            } => {
                if pid == ppid {
                    // A new thread, named as the thread that made it.
                    if let Some(p) = self.procs.get_mut(&pid) {
                        let name = p.thread_name(ptid).to_owned();
                        p.threads.insert(tid, name);
                    }
                } else if !self.procs.contains_key(&pid) {
                    // fork copies the address space (an exec follows or
                    // not) and only the forking thread.
                    if self.known(ppid) {
                        let mut child = self.procs[&ppid].clone();
                        let name = child.thread_name(ptid).to_owned();
                        child.threads.clear();
                        child.threads.insert(tid, name);
                        self.procs.insert(pid, child);
                    }
                }
            }
            Record::Exit { pid, tid, .. } => {
                if pid == tid {
                    self.procs.remove(&pid);
                } else if let Some(p) = self.procs.get_mut(&pid) {
                    p.threads.remove(&tid);
                }
            }
            Record::Lost { count } => self.stats.lost += count,
            Record::Other => {}
        }
    }

    /// Whether the process is known, reading it from /proc the first
    /// time it is met.
    fn known(&mut self, pid: u32) -> bool {
        if !self.procs.contains_key(&pid) {
            match self.read_proc(pid) {
                Some(p) => self.procs.insert(pid, p),
                None => return false,
            };
        }
        true
    }

    fn read_proc(&mut self, pid: u32) -> Option<Proc> {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        let mut p = Proc::new(pid, name.trim_end_matches('\n').to_string());
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for line in maps.lines() {
            if let Some((m, key, path)) = parse_maps_line(line) {
                let module = match key {
                    Some(key) => self.modules.get_or_load(key, path, pid),
                    None => self.modules.vdso(),
                };
                p.map(&self.modules, Mapping { module, ..m });
            }
        }
        Some(p)
    }

    fn mmap(&mut self, m: &Mmap<'_>) {
        const PROT_EXEC: u32 = 4;
        let vdso = m.path == module::VDSO.as_bytes();
        // Anonymous executable memory (`//anon`, JIT code) and memfd
        // mappings have no file to read: their frames stay Anon and are
        // named from the perf map.
        let file = m.path.starts_with(b"/")
            && !m.path.starts_with(b"//")
            && !m.path.starts_with(b"/memfd:");
        if m.prot & PROT_EXEC == 0 || !(file || vdso) {
            return;
        }
        let module = if vdso {
            self.modules.vdso()
        } else {
            let path = String::from_utf8_lossy(m.path).into_owned();
            let key = match (m.build_id, m.inode) {
                (Some(id), _) if !id.is_empty() => Key::BuildId(id.to_vec()),
                (_, Some((maj, min, ino))) => Key::Inode(maj, min, ino),
                _ => Key::Path(path.clone()),
            };
            self.modules.get_or_load(key, &path, m.pid)
        };
        let mapping = Mapping {
            start: m.start,
            end: m.start + m.len,
            pgoff: m.pgoff,
            module,
        };
        if self.known(m.pid) {
            if let Some(p) = self.procs.get_mut(&m.pid) {
                p.map(&self.modules, mapping);
            }
        }
    }

    fn sample(&mut self, s: &Sample<'_>) {
        if s.pid == 0 {
            self.stats.idle += 1;
            return;
        }
        // Buffers kept across samples: nothing is allocated for a stack
        // seen before (docs/BENCHMARKS.md, "The profiler").
        let mut frames = std::mem::take(&mut self.frames);
        let mut user_chain = std::mem::take(&mut self.user_chain);
        let mut user = std::mem::take(&mut self.user);
        frames.clear();
        user_chain.clear();
        user.clear();
        // The kernel's part, leaf first.
        let mut context = 0;
        for w in s.callchain() {
            if w >= PERF_CONTEXT_MAX {
                context = w;
                continue;
            }
            match context {
                PERF_CONTEXT_KERNEL => frames.push(RawFrame::Kernel(w)),
                PERF_CONTEXT_USER => user_chain.push(w),
                _ => {}
            }
        }
        let known = self.known(s.pid);
        if let Some(p) = self.procs.get_mut(&s.pid) {
            // Named before the borrows below (a new thread's name is read
            // from /proc once).
            p.thread(s.pid, s.tid);
        }
        let p = known.then(|| &self.procs[&s.pid]);
        if let Some(p) = p.filter(|_| !s.regs.is_empty()) {
            self.stats.user += 1;
            let complete = unwind(p, &self.modules, &mut self.cache, s, &mut user);
            // Where the kernel's frame-pointer walk went further (code
            // with frame pointers but no unwind info the unwinder
            // trusted), take it.
            let (addrs, complete) = if user_chain.len() > user.len() {
                (&user_chain, false)
            } else {
                (&user, complete)
            };
            if complete {
                self.stats.user_complete += 1;
            }
            for (i, &a) in addrs.iter().enumerate() {
                // Callers' addresses are return addresses: step back into
                // the call instruction.
                let lookup = if i == 0 { a } else { a.saturating_sub(1) };
                frames.push(match p.find(lookup) {
                    Some(m) => RawFrame::Module(m.module, lookup - m.start + m.pgoff),
                    None => RawFrame::Anon(s.pid, lookup),
                });
            }
        }
        if frames.is_empty() {
            frames.push(RawFrame::Anon(s.pid, s.ip));
        }
        frames.truncate(MAX_FRAMES);
        frames.reverse();
        self.stats.samples += 1;
        let name = p.map_or("", |p| p.name.as_str());
        let container = p.and_then(|p| p.container.as_ref());
        let pod = p.and_then(|p| p.pod.as_ref());
        let thread = p.map_or(name, |p| p.thread_name(s.tid));
        let key = StackRef {
            pid: s.pid,
            name,
            container: container.map(|c| &**c),
            pod: pod.map(|c| &**c),
            tid: s.tid,
            thread,
            frames: &frames,
        };
        match self.stacks.get_mut(&key) {
            Some(count) => *count += 1,
            None => {
                let key = ProcessKey {
                    pid: s.pid,
                    name: name.to_string(),
                    container: container.cloned(),
                    pod: pod.cloned(),
                    tid: s.tid,
                    thread: thread.to_string(),
                };
                self.stacks.insert((key, frames.clone()), 1);
            }
        }
        self.frames = frames;
        self.user_chain = user_chain;
        self.user = user;
    }
}

/// A counted stack's key, borrowed: looks up `(ProcessKey, Vec<RawFrame>)`
/// without building one. Hashes as the owned key does (derived `Hash`
/// writes the pid, the name, the container, the pod, the tid, the thread's name,
/// then the frames with their length; an `Option<Arc<str>>` hashes as the
/// `Option<&str>` it holds).
#[derive(Hash)]
struct StackRef<'a> {
    pid: u32,
    name: &'a str,
    container: Option<&'a str>,
    pod: Option<&'a str>,
    tid: u32,
    thread: &'a str,
    frames: &'a [RawFrame],
}

impl hashbrown::Equivalent<(ProcessKey, Vec<RawFrame>)> for StackRef<'_> {
    fn equivalent(&self, key: &(ProcessKey, Vec<RawFrame>)) -> bool {
        self.pid == key.0.pid
            && self.name == key.0.name
            && self.container == key.0.container.as_deref()
            && self.pod == key.0.pod.as_deref()
            && self.tid == key.0.tid
            && self.thread == key.0.thread
            && self.frames == key.1.as_slice()
    }
}

/// Unwinds the user stack of `s` into `out` (leaf first, raw addresses);
/// true when the unwinder reached the stack's end rather than failing.
///
/// framehop steps through every frame in a module; a return address in
/// no module (JIT code, CPython's perf trampolines) is stepped over by
/// [`anon_step`].
fn unwind(
    p: &Proc,
    modules: &Modules,
    cache: &mut CacheX86_64,
    s: &Sample<'_>,
    out: &mut Vec<u64>,
) -> bool {
    // REGS_USER_MASK order on x86_64: BP, SP, IP.
    let (Some(bp), Some(sp), Some(ip)) = (s.reg(0), s.reg(1), s.reg(2)) else {
        return false;
    };
    let stack = s.stack;
    let mut read = |addr: u64| -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
        let b = stack.get(off..off + 8).ok_or(())?;
        Ok(u64::from_ne_bytes(b.try_into().map_err(|_| ())?))
    };
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut address = FrameAddress::InstructionPointer(ip);
    out.push(ip);
    loop {
        let step = if address.is_return_address() && p.find(address.address_for_lookup()).is_none()
        {
            anon_step(p, modules, &mut regs, &mut read)
        } else if let Some(ra) = (!address.is_return_address())
            .then(|| frameless_leaf_step(p, modules, ip, &mut regs, &mut read))
            .flatten()
        {
            Ok(Some(ra))
        } else {
            p.unwinder
                .unwind_frame(address, &mut regs, cache, &mut read)
                .map_err(drop)
        };
        match step {
            Ok(Some(ra)) => {
                let Some(next) = FrameAddress::from_return_address(ra) else {
                    return false;
                };
                if out.len() == MAX_FRAMES {
                    return false;
                }
                out.push(ra);
                address = next;
            }
            Ok(None) => return true,
            Err(()) => return false,
        }
    }
}

/// One step out of a frame of code in no module, which has no unwind
/// table. Tried in turn:
///
/// 1. its frame pointer (JIT compilers that keep one: V8, HotSpot with
///    `-XX:+PreserveFramePointer`), taken when the return address it
///    gives is in JIT code too or follows a call in a module;
/// 2. a return address in the first or second slot above the stack
///    pointer that follows a call in a module: code that keeps no frame,
///    such as CPython's perf trampolines (`sub $8,%rsp; call *%rcx`),
///    which run in a CPython that is seldom built with frame pointers.
///
/// Checking that a return address follows a call instruction keeps a
/// stale value on the stack from passing for a caller.
fn anon_step(
    p: &Proc,
    modules: &Modules,
    regs: &mut UnwindRegsX86_64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, ()> {
    let (sp, bp) = (regs.sp(), regs.bp());
    let after_call = |ra: u64| follows_call(p, modules, ra);
    if bp > sp {
        if let (Ok(caller_bp), Ok(ra)) = (read(bp), read(bp + 8)) {
            if p.find(ra).is_none() || after_call(ra) {
                regs.set_sp(bp + 16);
                regs.set_bp(caller_bp);
                return Ok((ra != 0).then_some(ra));
            }
        }
    }
    for slot in [1, 0] {
        let at = sp + 8 * slot;
        if let Ok(ra) = read(at) {
            if after_call(ra) {
                regs.set_sp(at + 8);
                return Ok(Some(ra));
            }
        }
    }
    if bp == 0 {
        // The outermost frame of a frame-pointer chain.
        return Ok(None);
    }
    Err(())
}

/// The step out of a leaf function that has set up no frame, in a module
/// without unwind tables (Go binaries, which unwind by frame pointer):
/// framehop's frame-pointer rule would read the caller's frame and skip
/// the caller. Taken when the slot at the stack pointer holds a return
/// address after a direct call whose target lies at most 4 KiB before
/// the leaf's instruction pointer, that is, a call of the function the
/// leaf is in; a framed function's stack slot seldom holds such a value.
/// The same step is right at a framed function's first instruction,
/// before it has pushed its frame pointer.
fn frameless_leaf_step(
    p: &Proc,
    modules: &Modules,
    ip: u64,
    regs: &mut UnwindRegsX86_64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<u64> {
    let m = p.find(ip)?;
    let unwind = &modules.get(m.module).unwind;
    if unwind.eh_frame.is_some() || unwind.debug_frame.is_some() {
        return None;
    }
    let sp = regs.sp();
    let ra = read(sp).ok()?;
    let target = direct_call_target(p, modules, ra)?;
    if target > ip || ip - target >= 4096 {
        return None;
    }
    regs.set_sp(sp + 8);
    Some(ra)
}

/// The target of the `E8 rel32` call that ends right before `ra`, if one
/// does.
fn direct_call_target(p: &Proc, modules: &Modules, ra: u64) -> Option<u64> {
    x86::direct_call_target(code_before(p, modules, ra)?, ra)
}

/// Up to 8 bytes of a module's `.text` right before `ra`.
fn code_before<'m>(p: &Proc, modules: &'m Modules, ra: u64) -> Option<&'m [u8]> {
    let m = p.find(ra)?;
    let module = modules.get(m.module);
    let svma = module.svma_of_offset(ra - m.start + m.pgoff)?;
    let (range, text) = module.unwind.text.as_ref()?;
    if svma <= range.start || svma > range.end {
        return None;
    }
    let end = (svma - range.start) as usize;
    text.get(end.saturating_sub(8)..end)
}

/// Whether `ra` is in a module's `.text` right after a call instruction,
/// as a return address is.
fn follows_call(p: &Proc, modules: &Modules, ra: u64) -> bool {
    code_before(p, modules, ra).is_some_and(ends_with_call)
}

/// One executable, file-backed line of `/proc/PID/maps`, or the vDSO's
/// (with no key).
fn parse_maps_line(line: &str) -> Option<(Mapping, Option<Key>, &str)> {
    let mut f = line.split_ascii_whitespace();
    let range = f.next()?;
    let perms = f.next()?;
    let pgoff = u64::from_str_radix(f.next()?, 16).ok()?;
    let dev = f.next()?;
    let ino: u64 = f.next()?.parse().ok()?;
    let path = f.next()?;
    let vdso = path == module::VDSO;
    if !perms.contains('x') || !(vdso || path.starts_with('/') && ino != 0) {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    let key = (!vdso).then_some(Key::Inode(
        u32::from_str_radix(maj, 16).ok()?,
        u32::from_str_radix(min, 16).ok()?,
        ino,
    ));
    Some((
        Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            pgoff,
            module: 0,
        },
        key,
        path,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_stack_key_finds_the_owned_one() {
        let mut stacks: HashMap<(ProcessKey, Vec<RawFrame>), u64> = HashMap::new();
        let frames = vec![RawFrame::Kernel(1), RawFrame::Module(2, 3)];
        let id = "c".repeat(64);
        for container in [None, Some(Arc::from(id.as_str()))] {
            let key = ProcessKey {
                pid: 7,
                name: "demo".into(),
                container,
                pod: None,
                tid: 8,
                thread: "worker".into(),
            };
            stacks.insert((key, frames.clone()), 1);
        }
        let found = |pid, name, container, (tid, thread), frames: &[RawFrame]| {
            stacks
                .get(&StackRef {
                    pid,
                    name,
                    container,
                    pod: None,
                    tid,
                    thread,
                    frames,
                })
                .copied()
        };
        let t = (8, "worker");
        assert_eq!(found(7, "demo", None, t, &frames), Some(1));
        assert_eq!(found(7, "demo", Some(id.as_str()), t, &frames), Some(1));
        assert_eq!(found(7, "demo", Some("other"), t, &frames), None);
        assert_eq!(found(8, "demo", None, t, &frames), None);
        assert_eq!(found(7, "demo2", None, t, &frames), None);
        assert_eq!(found(7, "demo", None, (9, "worker"), &frames), None);
        assert_eq!(found(7, "demo", None, (8, "worker2"), &frames), None);
        assert_eq!(found(7, "demo", None, t, &frames[..1]), None);
    }

    #[test]
    fn samples_carry_their_threads_name_from_comm_fork_and_exit_records() {
        // A pid no process has, so nothing is read from /proc for it.
        const PID: u32 = u32::MAX - 7;
        let mut c = Collector::new();
        let comm = |tid, name: &'static str, exec| Record::Comm {
            pid: PID,
            tid,
            name: name.as_bytes(),
            exec,
            time: 0,
        };
        let sample = |tid| {
            Record::Sample(Sample {
                ip: 0x1000,
                pid: PID,
                tid,
                time: 0,
                callchain: &[],
                regs: &[],
                stack: &[],
            })
        };
        let threads = |c: &mut Collector| {
            let (stacks, _) = c.take();
            let mut named: Vec<(u32, String, String)> = stacks
                .keys()
                .map(|(k, _)| (k.tid, k.thread.clone(), k.name.clone()))
                .collect();
            named.sort();
            named
        };
        c.record(comm(PID, "server", true));
        // A thread made by the main thread is named as it until it renames
        // itself; one made by that thread is named as its maker.
        for (tid, ptid) in [(PID + 1, PID), (PID + 2, PID + 1)] {
            c.record(Record::Fork {
                pid: PID,
                ppid: PID,
                tid,
                ptid,
                time: 0,
            });
            c.record(sample(tid));
        }
        c.record(comm(PID + 1, "io-worker", false));
        c.record(sample(PID + 1));
        c.record(sample(PID));
        let s = String::from;
        assert_eq!(
            threads(&mut c),
            [
                (PID, s("server"), s("server")),
                (PID + 1, s("io-worker"), s("server")),
                (PID + 1, s("server"), s("server")),
                (PID + 2, s("server"), s("server")),
            ]
        );
        // The main thread's new name is the process's; an exited thread's
        // name is forgotten.
        c.record(comm(PID, "server-main", false));
        c.record(Record::Exit {
            pid: PID,
            tid: PID + 1,
            time: 0,
        });
        c.record(sample(PID));
        c.record(sample(PID + 1));
        assert_eq!(
            threads(&mut c),
            [
                (PID, s("server-main"), s("server-main")),
                (PID + 1, s("server-main"), s("server-main")),
            ]
        );
    }

    /// Descriptors of this process open on files under `dir`.
    fn open_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    #[test]
    fn prune_drops_gone_processes_and_closes_the_files_only_they_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut files = Vec::new();
        for name in ["a", "b", "c", "d"] {
            let path = dir.join(name);
            std::fs::copy(&exe, &path).unwrap();
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
            files.push((path.to_str().unwrap().to_string(), ino));
        }
        fn mmap(pid: u32, (path, ino): &(String, u64)) -> Record<'_> {
            Record::Mmap(Mmap {
                pid,
                start: 0x40_0000,
                len: 0x1000,
                pgoff: 0,
                inode: Some((0, 0, *ino)),
                build_id: None,
                prot: 5,
                path: path.as_bytes(),
                time: 1,
            })
        }
        let exec = |pid: u32| Record::Comm {
            pid,
            tid: pid,
            name: b"demo",
            exec: true,
            time: 1,
        };
        // Pids above pid_max: no process has them, so /proc has none.
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let (lost_exit, exited, alive) = (pid_max + 1, pid_max + 2, std::process::id());
        let mut c = Collector::new();
        c.record(exec(lost_exit));
        c.record(mmap(lost_exit, &files[0]));
        c.record(exec(exited));
        c.record(mmap(exited, &files[1]));
        c.record(mmap(alive, &files[2]));
        c.record(Record::Exit {
            pid: exited,
            tid: exited,
            time: 2,
        });
        assert_eq!(open_under(&dir), 3, "one descriptor per module");
        let before = c.modules().len();
        let _ = c.take();
        let dropped = c.prune();
        let mut paths: Vec<_> = dropped
            .iter()
            .map(|(i, _)| c.modules().get(*i).path.clone())
            .collect();
        paths.sort();
        assert_eq!(paths, ["", ""], "dropped modules leave empty slots");
        assert_eq!(dropped.len(), 2);
        assert_eq!(c.modules().len(), before - 2);
        assert_eq!(c.processes(), 1, "only the live process stays");
        assert_eq!(open_under(&dir), 1, "the dropped modules' files are closed");
        // A new module takes a freed index.
        c.record(mmap(alive, &files[3]));
        let reused = c.procs[&alive]
            .maps
            .iter()
            .find(|m| c.modules().get(m.module).path == files[3].0)
            .unwrap()
            .module;
        assert!(
            dropped.iter().any(|d| d.0 == reused),
            "index {reused} is new"
        );
        assert_eq!(c.modules().len(), before - 1);
    }
}
