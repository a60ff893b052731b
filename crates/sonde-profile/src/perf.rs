//! The kernel side: one software cpu-clock event per CPU for every
//! process, each with its ring buffer, and draining the rings in time
//! order.
//!
//! # Design
//!
//! Each event samples its CPU at `frequency` Hz whatever runs there, and
//! writes the process side-band (mmap2, comm, fork, exit) of the tasks on
//! that CPU into the same ring. A process can `exec` on one CPU and be
//! sampled on another, so [`Events::drain`] copies every ring's records
//! into one arena and hands them out sorted by time: the mappings a
//! sample needs are always seen before it. Records carry CLOCK_MONOTONIC
//! times so that they convert to wall time.
//!
//! A ring is 128 data pages (512 KiB) per CPU: at 16 KiB of stack per
//! sample that holds about 31 samples, 1.6 s of one CPU at 19 Hz and
//! 0.3 s at 99 Hz, so the reader can spend that long symbolising a period
//! without losing samples; the event wakes it every four samples. That is
//! the kernel's default per-user budget of locked ring memory
//! (`perf_event_mlock_kb`, 516 KiB per CPU); where other perf users have
//! taken part of it, the ring is halved, down to 32 pages. Samples the
//! kernel drops anyway are counted ([`Events::lost`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use perf_event_open_sys as sys;

use crate::record::{self, Record, REGS_USER_MASK, SAMPLE_TYPE};

/// Bytes of user stack each sample copies. Enough for the C, C++, Rust
/// and Go programs measured in docs/PROFILING.md to unwind to their entry
/// point; deeper stacks stop early and are counted as truncated.
pub const STACK_BYTES: u32 = 16 * 1024;

/// Data pages per ring, tried in order: the kernel refuses a mapping over
/// the user's locked-memory budget for perf (`perf_event_mlock_kb`, 516
/// KiB per CPU by default, shared with any other perf tool the user runs),
/// so a smaller ring is tried before giving up.
const DATA_PAGES: [usize; 3] = [128, 64, 32];

/// Bytes in a ring that wake the reader: four samples with their stacks.
const WAKEUP_BYTES: u32 = 4 * (STACK_BYTES + 1024);

/// Why the events could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The kernel refused: the process lacks the permission.
    #[error(
        "perf events are not permitted here ({error}): run as root, or give the binary \
         CAP_PERFMON (Linux 5.8+; `sudo setcap cap_perfmon+ep $(which sonde)`), or allow \
         every user with `sudo sysctl kernel.perf_event_paranoid=-1` (it is {paranoid})"
    )]
    NotPermitted {
        /// The error perf_event_open returned.
        error: io::Error,
        /// `/proc/sys/kernel/perf_event_paranoid`, or "unknown".
        paranoid: String,
    },
    /// Another failure opening or mapping an event.
    #[error("opening the cpu-clock event on CPU {cpu}: {error}")]
    Io {
        /// The CPU.
        cpu: usize,
        /// What failed.
        error: io::Error,
    },
}

/// One CPU's event and its ring.
struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_size: u64,
    data_offset: usize,
}

// SAFETY: the mapping is owned by this Ring alone and only read or
// written through &mut self; moving it to another thread is fine.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base and map_len come from the successful mmap in open_cpu.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

impl Ring {
    fn page(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.cast()
    }

    /// Copies every record written since the last call into `arena`,
    /// pushing (time, offset, length) for each into `index`; returns the
    /// records the kernel reported lost.
    fn drain(&mut self, arena: &mut Vec<u8>, index: &mut Vec<(u64, usize, usize)>) -> u64 {
        let page = self.page();
        // SAFETY: the control page stays mapped while self lives;
        // data_head is written by the kernel, so it is read volatile and
        // followed by an acquire fence before the data it covers is read.
        let head = unsafe { std::ptr::addr_of!((*page).data_head).read_volatile() };
        fence(Ordering::Acquire);
        // SAFETY: as above; data_tail is only written by this process.
        let mut tail = unsafe { std::ptr::addr_of!((*page).data_tail).read_volatile() };
        let mut lost = 0;
        let data = self.base.wrapping_add(self.data_offset);
        let mut header = [0u8; 8];
        while tail < head {
            self.copy(data, tail, &mut header);
            let size = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if size < 8 || tail + size > head {
                break;
            }
            let start = arena.len();
            arena.resize(start + size as usize, 0);
            self.copy(data, tail, &mut arena[start..]);
            match record::parse(&arena[start..]) {
                Some(Record::Lost { count }) => {
                    lost += count;
                    arena.truncate(start);
                }
                Some(Record::Other) | None => arena.truncate(start),
                Some(r) => index.push((r.time().unwrap_or(0), start, size as usize)),
            }
            tail += size;
        }
        fence(Ordering::Release);
        // SAFETY: as above; writing data_tail hands the space back to the
        // kernel after the reads it covers (the release fence).
        unsafe { std::ptr::addr_of_mut!((*page).data_tail).write_volatile(tail) };
        lost
    }

    /// Copies `out.len()` bytes of the ring from position `pos`,
    /// wrapping at the end of the data area.
    fn copy(&self, data: *const u8, pos: u64, out: &mut [u8]) {
        let size = self.data_size as usize;
        let at = (pos % self.data_size) as usize;
        let first = out.len().min(size - at);
        // SAFETY: `at + first <= size` and the remainder starts at 0 and is
        // shorter than `size`, so both reads stay inside the data area
        // mapped in open_cpu; out is a distinct, live buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(at), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

/// The per-CPU events of one profiler.
pub struct Events {
    rings: Vec<Ring>,
    arena: Vec<u8>,
    index: Vec<(u64, usize, usize)>,
    lost: u64,
}

/// The CPUs the kernel has online.
pub fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-').map(|n| n.parse::<usize>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) => cpus.extend(a..=b),
            (Some(Ok(a)), None) => cpus.push(a),
            _ => {}
        }
    }
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.extend(0..n);
    }
    cpus
}

fn attr(frequency: u32, build_id: bool) -> sys::bindings::perf_event_attr {
    let mut a = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
        sample_type: SAMPLE_TYPE,
        sample_regs_user: REGS_USER_MASK,
        sample_stack_user: STACK_BYTES,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    a.__bindgen_anon_1.sample_freq = u64::from(frequency);
    a.__bindgen_anon_2.wakeup_watermark = WAKEUP_BYTES;
    a.set_freq(1);
    a.set_disabled(1);
    a.set_mmap(1);
    a.set_mmap2(1);
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_task(1);
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.set_watermark(1);
    a.set_exclude_guest(1);
    a.set_build_id(u64::from(build_id));
    a
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

fn open_cpu(cpu: usize, frequency: u32) -> Result<Ring, io::Error> {
    // Build ids in mmap2 records (Linux 5.12+) let modules be shared by
    // id; older kernels refuse the bit with EINVAL, and get inodes.
    let mut fd = -1;
    let mut err = io::Error::from_raw_os_error(libc::EINVAL);
    for build_id in [true, false] {
        let mut a = attr(frequency, build_id);
        // SAFETY: `a` is a valid, fully initialised perf_event_attr whose
        // size field matches the struct; the other arguments are plain ints.
        fd = unsafe {
            sys::perf_event_open(
                &mut a,
                -1,
                cpu as i32,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
            )
        };
        if fd >= 0 {
            break;
        }
        err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            break;
        }
    }
    if fd < 0 {
        return Err(err);
    }
    // SAFETY: fd was just returned by perf_event_open and is owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let page = page_size();
    let mut mapped = None;
    let mut err = io::Error::from_raw_os_error(libc::ENOMEM);
    for pages in DATA_PAGES {
        let map_len = page * (1 + pages);
        // SAFETY: mapping a perf event fd shared and read-write is how its
        // ring is reached; the length is one control page plus a
        // power-of-two count of data pages, as the kernel requires.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base != libc::MAP_FAILED {
            mapped = Some((base, map_len, pages));
            break;
        }
        err = io::Error::last_os_error();
    }
    let Some((base, map_len, pages)) = mapped else {
        return Err(err);
    };
    let base = base.cast::<u8>();
    let page_ptr = base.cast::<sys::bindings::perf_event_mmap_page>();
    // SAFETY: the control page is mapped; data_offset/data_size are set by
    // the kernel before mmap returns (zero on kernels before 4.1).
    let (offset, size) = unsafe { ((*page_ptr).data_offset, (*page_ptr).data_size) };
    let (data_offset, data_size) = if size == 0 {
        (page, (page * pages) as u64)
    } else {
        (offset as usize, size)
    };
    Ok(Ring {
        fd,
        base,
        map_len,
        data_size,
        data_offset,
    })
}

impl Events {
    /// Opens one event per online CPU at `frequency` samples per second,
    /// disabled until [`Events::enable`].
    ///
    /// # Errors
    ///
    /// [`OpenError::NotPermitted`] without the permission to sample every
    /// process, with a message that says what to change.
    pub fn open(frequency: u32) -> Result<Events, OpenError> {
        let mut rings = Vec::new();
        for cpu in online_cpus() {
            match open_cpu(cpu, frequency) {
                Ok(ring) => rings.push(ring),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
                    return Err(OpenError::NotPermitted { error: e, paranoid });
                }
                Err(e) => return Err(OpenError::Io { cpu, error: e }),
            }
        }
        Ok(Events {
            rings,
            arena: Vec::new(),
            index: Vec::new(),
            lost: 0,
        })
    }

    /// Starts sampling.
    pub fn enable(&self) {
        for ring in &self.rings {
            // SAFETY: ENABLE on a perf event fd this struct owns.
            unsafe { sys::ioctls::ENABLE(ring.fd.as_raw_fd(), 0) };
        }
    }

    /// Stops sampling; what is in the rings can still be drained.
    pub fn disable(&self) {
        for ring in &self.rings {
            // SAFETY: DISABLE on a perf event fd this struct owns.
            unsafe { sys::ioctls::DISABLE(ring.fd.as_raw_fd(), 0) };
        }
    }

    /// Waits up to `timeout_ms` for a ring to pass its watermark.
    pub fn wait(&self, timeout_ms: i32) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a live array of fds.len() pollfd structs.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    }

    /// Records the kernel dropped because a ring was full, so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Hands every record now in the rings to `each`, oldest first across
    /// all CPUs.
    pub fn drain(&mut self, mut each: impl FnMut(Record<'_>)) {
        self.drain_bytes(|bytes| {
            if let Some(r) = record::parse(bytes) {
                each(r);
            }
        });
    }

    /// As [`Events::drain`], handing out each record's bytes (header
    /// included) for [`record::parse`]: for keeping records to replay.
    pub fn drain_bytes(&mut self, mut each: impl FnMut(&[u8])) {
        self.arena.clear();
        self.index.clear();
        for ring in &mut self.rings {
            self.lost += ring.drain(&mut self.arena, &mut self.index);
        }
        self.index
            .sort_unstable_by_key(|&(time, start, _)| (time, start));
        for &(_, start, len) in &self.index {
            each(&self.arena[start..start + len]);
        }
    }
}
