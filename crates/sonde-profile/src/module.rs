//! Executable files mapped by the sampled processes: read once, shared by
//! every process that maps them.
//!
//! A [`Modules`] table keys each file by its GNU build id where the kernel
//! reports one (mmap2 records on Linux 5.12+) and by device and inode
//! otherwise, so libc mapped by 300 processes is parsed and held once. A
//! module keeps an open descriptor to its file: the file is reached
//! through `/proc/PID/root` while the process lives (its own mount
//! namespace, so containers work), and symbolisation reads it through
//! `/proc/self/fd/N` after the process has exited or the file was deleted.

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashMap;
use object::{Object, ObjectSection, ObjectSegment};

/// Section bytes shared between the processes that map a module: a range
/// of the file mapped read-only, so a large binary's `.text` costs page
/// cache that the kernel can reclaim, not heap.
#[derive(Clone, Debug)]
pub struct Bytes {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// What framehop needs of a module to unwind through it.
#[derive(Debug, Default)]
pub struct Unwind {
    /// `.text`'s address range and bytes (for prologue and epilogue
    /// analysis at the leaf).
    pub text: Option<(Range<u64>, Bytes)>,
    /// `.eh_frame`.
    pub eh_frame: Option<(Range<u64>, Bytes)>,
    /// `.eh_frame_hdr`, the binary search table over `.eh_frame`.
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    /// `.debug_frame`, where a file has no `.eh_frame`.
    pub debug_frame: Option<Bytes>,
    /// `.got`'s address range, for got-relative CFI.
    pub got: Option<Range<u64>>,
}

/// One file the profiler has met.
#[derive(Debug)]
pub struct Module {
    /// The path as the process named it.
    pub path: String,
    /// An open descriptor, so the file stays readable after its process
    /// exits; `None` when it could not be opened.
    file: Option<File>,
    /// The file's loadable segments: (file offset, virtual address, file size).
    segments: Vec<(u64, u64, u64)>,
    /// Unwind sections, shared.
    pub unwind: Arc<Unwind>,
}

impl Module {
    /// The path blazesym reads the file at.
    pub fn open_path(&self) -> Option<PathBuf> {
        self.file
            .as_ref()
            .map(|f| PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())))
    }

    /// The virtual address (SVMA) the file assigns to a file offset.
    pub fn svma_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(off, _, size)| offset >= off && offset < off + size.max(1))
            .map(|&(off, vaddr, _)| vaddr + (offset - off))
    }

    /// Where the process mapped the file's address 0, given one mapping
    /// (start address and file offset): framehop's `base_avma`.
    pub fn base_avma(&self, start: u64, pgoff: u64) -> u64 {
        match self.svma_of_offset(pgoff) {
            Some(svma) => start.wrapping_sub(svma),
            None => start.wrapping_sub(pgoff),
        }
    }
}

/// How a module is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// The GNU build id.
    BuildId(Vec<u8>),
    /// Device major, minor and inode.
    Inode(u32, u32, u64),
    /// Only the path (modules read from `/proc/PID/maps` without an inode).
    Path(String),
}

/// Every module met, by key, with indices that stay valid.
#[derive(Debug, Default)]
pub struct Modules {
    by_key: HashMap<Key, u32>,
    /// The same files by the (device, inode) of the opened file, since
    /// mmap2 records name a file by build id and /proc/PID/maps by inode.
    by_stat: HashMap<(u64, u64), u32>,
    modules: Vec<Module>,
}

impl Modules {
    /// The module at an index.
    pub fn get(&self, index: u32) -> &Module {
        &self.modules[index as usize]
    }

    /// How many modules are loaded.
    pub fn len(&self) -> usize {
        self.modules.len()
    }

    /// True when no module is loaded.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// The index of the module with `key`, reading the file (through
    /// `/proc/{pid}/root`, then the plain path) the first time.
    pub fn get_or_load(&mut self, key: Key, path: &str, pid: u32) -> u32 {
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        let module = load(path, pid);
        let stat = module
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| (m.dev(), m.ino()));
        if let Some(&i) = stat.and_then(|s| self.by_stat.get(&s)) {
            self.by_key.insert(key, i);
            return i;
        }
        let i = self.modules.len() as u32;
        self.modules.push(module);
        self.by_key.insert(key, i);
        if let Some(s) = stat {
            self.by_stat.insert(s, i);
        }
        i
    }
}

fn load(path: &str, pid: u32) -> Module {
    let file = File::open(format!("/proc/{pid}/root{path}"))
        .or_else(|_| File::open(path))
        .ok();
    let mut module = Module {
        path: path.to_string(),
        file,
        segments: Vec::new(),
        unwind: Arc::default(),
    };
    let Some(file) = &module.file else {
        return module;
    };
    // SAFETY: the file is mapped read-only and private; a process that
    // truncates a binary it is running would crash itself first, and a
    // module whose file changes is read again under its new build id.
    let Ok(map) = (unsafe { memmap2::Mmap::map(file) }) else {
        return module;
    };
    let map = Arc::new(map);
    let Ok(elf) = object::File::parse(&**map) else {
        return module;
    };
    module.segments = elf
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, s.address(), size)
        })
        .collect();
    let section = |name: &str| {
        let s = elf.section_by_name(name)?;
        let compressed = s.compressed_file_range().ok()?;
        if compressed.format != object::CompressionFormat::None {
            return None;
        }
        let (off, len) = (compressed.offset, compressed.compressed_size);
        let range = usize::try_from(off).ok()?..usize::try_from(off + len).ok()?;
        map.get(range.clone())?;
        Some((
            s.address()..s.address() + s.size(),
            Bytes {
                map: map.clone(),
                range,
            },
        ))
    };
    module.unwind = Arc::new(Unwind {
        text: section(".text"),
        eh_frame: section(".eh_frame"),
        eh_frame_hdr: section(".eh_frame_hdr"),
        debug_frame: section(".debug_frame").map(|(_, b)| b),
        got: elf
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size()),
    });
    module
}

/// The module's sections as framehop takes them.
pub fn section_info(unwind: &Unwind) -> framehop::ExplicitModuleSectionInfo<Bytes> {
    framehop::ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: unwind.text.as_ref().map(|(r, _)| r.clone()),
        text: unwind.text.as_ref().map(|(_, b)| b.clone()),
        got_svma: unwind.got.clone(),
        eh_frame_svma: unwind.eh_frame.as_ref().map(|(r, _)| r.clone()),
        eh_frame: unwind.eh_frame.as_ref().map(|(_, b)| b.clone()),
        eh_frame_hdr_svma: unwind.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
        eh_frame_hdr: unwind.eh_frame_hdr.as_ref().map(|(_, b)| b.clone()),
        debug_frame: unwind.debug_frame.clone(),
        stubs_svma: None,
        stub_helper_svma: None,
        unwind_info: None,
        text_segment_svma: None,
        text_segment: None,
    }
}
