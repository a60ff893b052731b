//! Parsing the records a perf ring buffer holds, as this crate's events
//! are configured to write them (see [`SAMPLE_TYPE`]).
//!
//! Pure and allocation-free: [`parse`] borrows from the record's bytes, so
//! a sample's 16 KiB stack copy is never copied again. Every length is
//! checked; a malformed record is `None`, never a panic.

/// The fields each sample carries, in the kernel's order: IP, TID, TIME,
/// CALLCHAIN, REGS_USER, STACK_USER.
pub const SAMPLE_TYPE: u64 = PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_CALLCHAIN
    | PERF_SAMPLE_REGS_USER
    | PERF_SAMPLE_STACK_USER;

const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;

/// The user registers each sample copies: on x86_64 BP (6), SP (7) and
/// IP (8), the three framehop needs; on aarch64 X29 (the frame pointer),
/// LR (30), SP (31) and PC (32).
#[cfg(target_arch = "x86_64")]
pub const REGS_USER_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// The user registers each sample copies (see the x86_64 doc).
#[cfg(target_arch = "aarch64")]
pub const REGS_USER_MASK: u64 = (1 << 29) | (1 << 30) | (1 << 31) | (1 << 32);

const PERF_RECORD_MMAP2: u32 = 10;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Callchain entries at or above this value are context markers
/// (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, ...), not addresses.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// Marks the start of the kernel part of a callchain.
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// Marks the start of the user part of a callchain.
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// One record from a ring buffer, borrowing its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// A stack sample.
    Sample(Sample<'a>),
    /// An executable mapping was created (`mmap` of a file or anonymous
    /// executable memory).
    Mmap(Mmap<'a>),
    /// A thread's name changed, or (with `exec`) the process replaced its
    /// image.
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The new name.
        name: &'a [u8],
        /// True when the change comes from `exec`: the address space is new.
        exec: bool,
        /// When, in the events' clock (CLOCK_MONOTONIC nanoseconds).
        time: u64,
    },
    /// A thread or process was created.
    Fork {
        /// The new thread's process id.
        pid: u32,
        /// The parent's process id.
        ppid: u32,
        /// The new thread's id.
        tid: u32,
        /// The id of the thread that created it.
        ptid: u32,
        /// When.
        time: u64,
    },
    /// A thread exited (the process, when `pid == tid`).
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// When.
        time: u64,
    },
    /// The ring was full and the kernel dropped this many records.
    Lost {
        /// Records dropped.
        count: u64,
    },
    /// A record type this crate does not read.
    Other,
}

impl Record<'_> {
    /// The record's time, for ordering records from several rings
    /// (`None` for records without one).
    pub fn time(&self) -> Option<u64> {
        match self {
            Record::Sample(s) => Some(s.time),
            Record::Mmap(m) => Some(m.time),
            Record::Comm { time, .. } | Record::Fork { time, .. } | Record::Exit { time, .. } => {
                Some(*time)
            }
            Record::Lost { .. } | Record::Other => None,
        }
    }
}

/// A stack sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The instruction pointer (kernel or user).
    pub ip: u64,
    /// Process id; 0 is the idle task.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When, in the events' clock.
    pub time: u64,
    /// The kernel's callchain as raw u64 words: context markers and
    /// addresses, leaf first (see [`PERF_CONTEXT_KERNEL`]).
    pub callchain: &'a [u8],
    /// The user registers of [`REGS_USER_MASK`] in bit order, or empty when
    /// the sample has none (a kernel thread).
    pub regs: &'a [u8],
    /// The copy of the user stack from the stack pointer up.
    pub stack: &'a [u8],
}

impl Sample<'_> {
    /// The callchain's words.
    pub fn callchain(&self) -> impl Iterator<Item = u64> + '_ {
        self.callchain
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
    }

    /// User register `i` in [`REGS_USER_MASK`]'s bit order.
    pub fn reg(&self, i: usize) -> Option<u64> {
        let b = self.regs.get(i * 8..i * 8 + 8)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
}

/// An executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// Offset into the file of the mapping's first byte.
    pub pgoff: u64,
    /// The file's device and inode, where the kernel gave them.
    pub inode: Option<(u32, u32, u64)>,
    /// The file's GNU build id, where the kernel gave it instead.
    pub build_id: Option<&'a [u8]>,
    /// Protection bits (`PROT_EXEC` and so on).
    pub prot: u32,
    /// The file's path (`//anon`, `[vdso]` and so on for others).
    pub path: &'a [u8],
    /// When.
    pub time: u64,
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(u64::from_ne_bytes(*head))
    }
    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_ne_bytes(*head))
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }
    /// The `sample_id` trailer of a non-sample record: TID and TIME, the
    /// last 16 bytes (`sample_id_all` with [`SAMPLE_TYPE`]).
    fn trailer_time(bytes: &[u8]) -> Option<u64> {
        let t = bytes.len().checked_sub(8)?;
        Some(u64::from_ne_bytes(bytes[t..].try_into().ok()?))
    }
}

/// A NUL-terminated string padded to 8 bytes, without its padding.
fn c_str(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// Parses one whole record (header included). `None` when it is shorter
/// than its type requires.
pub fn parse(record: &[u8]) -> Option<Record<'_>> {
    let mut r = Reader { bytes: record };
    let kind = r.u32()?;
    let misc = r.u32()? as u16;
    let body = r.bytes;
    match kind {
        PERF_RECORD_SAMPLE => parse_sample(body).map(Record::Sample),
        PERF_RECORD_MMAP2 => {
            let pid = r.u32()?;
            let _tid = r.u32()?;
            let start = r.u64()?;
            let len = r.u64()?;
            let pgoff = r.u64()?;
            let (inode, build_id) = if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                let size = r.take(4)?[0] as usize;
                let id = r.take(20)?;
                (None, Some(id.get(..size.min(20))?))
            } else {
                let maj = r.u32()?;
                let min = r.u32()?;
                let ino = r.u64()?;
                let _gen = r.u64()?;
                (Some((maj, min, ino)), None)
            };
            let prot = r.u32()?;
            let _flags = r.u32()?;
            // The path runs to a NUL; the 16-byte trailer follows it.
            let rest = r.bytes;
            let time = Reader::trailer_time(rest)?;
            let path = c_str(rest.get(..rest.len().checked_sub(16)?)?);
            Some(Record::Mmap(Mmap {
                pid,
                start,
                len,
                pgoff,
                inode,
                build_id,
                prot,
                path,
                time,
            }))
        }
        PERF_RECORD_COMM => {
            let pid = r.u32()?;
            let tid = r.u32()?;
            let rest = r.bytes;
            let time = Reader::trailer_time(rest)?;
            let name = c_str(rest.get(..rest.len().checked_sub(16)?)?);
            Some(Record::Comm {
                pid,
                tid,
                name,
                exec: misc & PERF_RECORD_MISC_COMM_EXEC != 0,
                time,
            })
        }
        PERF_RECORD_FORK | PERF_RECORD_EXIT => {
            let pid = r.u32()?;
            let ppid = r.u32()?;
            let tid = r.u32()?;
            let ptid = r.u32()?;
            let time = r.u64()?;
            Some(if kind == PERF_RECORD_FORK {
                Record::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            } else {
                Record::Exit { pid, tid, time }
            })
        }
        PERF_RECORD_LOST => {
            let _id = r.u64()?;
            Some(Record::Lost { count: r.u64()? })
        }
        _ => {
            let _ = body;
            Some(Record::Other)
        }
    }
}

fn parse_sample(body: &[u8]) -> Option<Sample<'_>> {
    let mut r = Reader { bytes: body };
    let ip = r.u64()?;
    let pid = r.u32()?;
    let tid = r.u32()?;
    let time = r.u64()?;
    let nr = r.u64()?;
    let callchain = r.take(usize::try_from(nr).ok()?.checked_mul(8)?)?;
    let abi = r.u64()?;
    let regs = if abi == 0 {
        &[][..]
    } else {
        r.take(REGS_USER_MASK.count_ones() as usize * 8)?
    };
    let size = r.u64()?;
    let stack = if size == 0 {
        &[][..]
    } else {
        let data = r.take(usize::try_from(size).ok()?)?;
        let dyn_size = r.u64()?;
        data.get(..usize::try_from(dyn_size).ok()?.min(data.len()))?
    };
    Some(Sample {
        ip,
        pid,
        tid,
        time,
        callchain,
        regs,
        stack,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record as the kernel lays it out: header, then `body`.
    pub(crate) fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&misc.to_ne_bytes());
        out.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// A sample body with these fields.
    pub(crate) fn sample_body(
        pid: u32,
        tid: u32,
        time: u64,
        chain: &[u64],
        regs: &[u64],
        stack: &[u8],
    ) -> Vec<u8> {
        let mut b = words(&[0x1234]);
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend(words(&[time, chain.len() as u64]));
        b.extend(words(chain));
        if regs.is_empty() {
            b.extend(words(&[0, 0]));
        } else {
            b.extend(words(&[2]));
            b.extend(words(regs));
            let padded = stack.len().div_ceil(8) * 8 + 64;
            b.extend(words(&[padded as u64]));
            b.extend_from_slice(stack);
            b.resize(b.len() + padded - stack.len(), 0);
            b.extend(words(&[stack.len() as u64]));
        }
        b
    }

    #[test]
    fn a_sample_gives_back_each_field_and_only_the_copied_stack() {
        let stack: Vec<u8> = (0..40).collect();
        let body = sample_body(
            7,
            8,
            99,
            &[PERF_CONTEXT_USER, 0x401000, 0x402000],
            &[1, 2, 3],
            &stack,
        );
        let bytes = record(PERF_RECORD_SAMPLE, 2, &body);
        let Some(Record::Sample(s)) = parse(&bytes) else {
            panic!("not a sample");
        };
        assert_eq!((s.ip, s.pid, s.tid, s.time), (0x1234, 7, 8, 99));
        assert_eq!(
            s.callchain().collect::<Vec<_>>(),
            vec![PERF_CONTEXT_USER, 0x401000, 0x402000]
        );
        assert_eq!((s.reg(0), s.reg(2), s.reg(3)), (Some(1), Some(3), None));
        assert_eq!(s.stack, &stack[..]);
    }

    #[test]
    fn a_kernel_thread_sample_has_no_registers_and_no_stack() {
        let body = sample_body(
            5,
            5,
            1,
            &[PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0000],
            &[],
            &[],
        );
        let bytes = record(PERF_RECORD_SAMPLE, 1, &body);
        let Some(Record::Sample(s)) = parse(&bytes) else {
            panic!("not a sample");
        };
        assert!(s.regs.is_empty() && s.stack.is_empty());
    }

    #[test]
    fn an_mmap2_record_with_a_build_id_gives_the_id_path_and_time() {
        let mut body = Vec::new();
        body.extend_from_slice(&3u32.to_ne_bytes());
        body.extend_from_slice(&3u32.to_ne_bytes());
        body.extend(words(&[0x7000, 0x2000, 0x1000]));
        body.push(20);
        body.extend_from_slice(&[0; 3]);
        body.extend((1..=20).collect::<Vec<u8>>());
        body.extend_from_slice(&5u32.to_ne_bytes());
        body.extend_from_slice(&2u32.to_ne_bytes());
        body.extend_from_slice(b"/usr/lib/libc.so.6\0\0\0\0\0\0");
        body.extend(words(&[0x0000_0003_0000_0003, 777]));
        let bytes = record(PERF_RECORD_MMAP2, PERF_RECORD_MISC_MMAP_BUILD_ID, &body);
        let Some(Record::Mmap(m)) = parse(&bytes) else {
            panic!("not an mmap");
        };
        assert_eq!(
            (m.pid, m.start, m.len, m.pgoff),
            (3, 0x7000, 0x2000, 0x1000)
        );
        assert_eq!(m.build_id.map(<[u8]>::len), Some(20));
        assert_eq!(m.path, b"/usr/lib/libc.so.6");
        assert_eq!((m.prot, m.time), (5, 777));
    }

    #[test]
    fn a_comm_record_from_exec_says_so() {
        let mut body = Vec::new();
        body.extend_from_slice(&9u32.to_ne_bytes());
        body.extend_from_slice(&9u32.to_ne_bytes());
        body.extend_from_slice(b"demo\0\0\0\0");
        body.extend(words(&[0, 55]));
        let bytes = record(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC, &body);
        assert_eq!(
            parse(&bytes),
            Some(Record::Comm {
                pid: 9,
                tid: 9,
                name: b"demo",
                exec: true,
                time: 55
            })
        );
    }

    #[test]
    fn a_truncated_record_is_none_at_every_length() {
        let body = sample_body(7, 8, 99, &[PERF_CONTEXT_USER, 1, 2], &[1, 2, 3], &[9; 64]);
        let whole = record(PERF_RECORD_SAMPLE, 2, &body);
        assert!(parse(&whole).is_some());
        for n in 0..whole.len() - 8 {
            assert_eq!(parse(&whole[..n]), None, "length {n}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
