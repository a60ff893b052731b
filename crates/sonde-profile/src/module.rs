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
//! Once no tracked process maps a module, [`Modules::retain`] drops it
//! (closing the descriptor and the mapping), so a host that runs ever new
//! binaries does not grow the profiler's descriptors or memory.

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

/// The path of the vDSO in maps and mmap records, and its module name.
pub const VDSO: &str = "[vdso]";

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
    /// The file's loadable segments: (file offset, virtual address, file
    /// size, executable).
    segments: Vec<(u64, u64, u64, bool)>,
    /// Unwind sections, shared.
    pub unwind: Arc<Unwind>,
    /// (start, end, name) by virtual address, for a module without a file
    /// (the vDSO); files are named by blazesym instead.
    symbols: Vec<(u64, u64, String)>,
    /// The file's mapping, which the unwind sections borrow from; `None`
    /// for the vDSO, whose copy is anonymous memory.
    map: Option<Arc<memmap2::Mmap>>,
}

impl Module {
    /// The empty slot a dropped module leaves.
    fn gone() -> Module {
        Module {
            path: String::new(),
            file: None,
            segments: Vec::new(),
            unwind: Arc::default(),
            symbols: Vec::new(),
            map: None,
        }
    }

    /// Gives back the pages of the file that unwinding touched: they stay
    /// in the page cache (the processes that run the file share them),
    /// and the next read of one maps it again, a minor fault.
    ///
    /// # Design
    ///
    /// Each unwound frame reads `.eh_frame_hdr`'s binary search, its
    /// `.eh_frame` entry and, at the leaf, `.text`: pages that count in
    /// the agent's RSS for as long as they stay mapped. On a host running
    /// a Rust build, the agent held 21.6 MiB of `librustc_driver` (this
    /// mapping and blazesym's) after three minutes, and under 1 MiB with
    /// the pages released every second: what is held is bounded by the
    /// samples since the last release, for one `madvise` a module each
    /// time and the minor faults of reading the pages again.
    pub fn release_pages(&self) {
        if let Some(map) = &self.map {
            // SAFETY: the mapping is a read-only shared mapping of the
            // file (memmap2's `Mmap::map`), never written, so it holds no
            // page of its own: MADV_DONTNEED only drops this process's
            // view of the page cache, and a later read finds the file's
            // bytes again, as before. No reference into it is
            // invalidated.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// The path blazesym reads the file at.
    pub fn open_path(&self) -> Option<PathBuf> {
        self.file
            .as_ref()
            .map(|f| PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())))
    }

    /// The name of the function at a file offset, for modules without a
    /// file (see [`Module::open_path`] for the others).
    pub fn symbol_at(&self, offset: u64) -> Option<&str> {
        let svma = self.svma_of_offset(offset)?;
        let i = self
            .symbols
            .partition_point(|s| s.0 <= svma)
            .checked_sub(1)?;
        let (start, end, name) = &self.symbols[i];
        (svma >= *start && svma < *end).then_some(name.as_str())
    }

    /// The virtual address (SVMA) where the function holding a file offset
    /// starts, from the module's unwind tables: every function a compiler
    /// emits call frame information for has an entry there whose range is
    /// its code, symbol table or not, so a stripped binary's code can still
    /// be told apart function by function (and named later, as `nm` or
    /// `addr2line` on its debug symbols name that address). `None` for an
    /// offset no entry covers, or a module without `.eh_frame`.
    pub fn function_start(&self, offset: u64) -> Option<u64> {
        use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
        let svma = self.svma_of_offset(offset)?;
        let (eh_range, eh) = self.unwind.eh_frame.as_ref()?;
        let eh_frame = EhFrame::new(eh, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(eh_range.start);
        if let Some((r, _)) = &self.unwind.text {
            bases = bases.set_text(r.start);
        }
        if let Some(r) = &self.unwind.got {
            bases = bases.set_got(r.start);
        }
        let fde = match &self.unwind.eh_frame_hdr {
            // The binary search table the linker writes beside it.
            Some((hdr_range, hdr)) => {
                let bases = bases.clone().set_eh_frame_hdr(hdr_range.start);
                let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
                parsed
                    .table()?
                    .fde_for_address(&eh_frame, &bases, svma, EhFrame::cie_from_offset)
                    .ok()?
            }
            // Without it, a walk over every entry.
            None => eh_frame
                .fde_for_address(&bases, svma, EhFrame::cie_from_offset)
                .ok()?,
        };
        Some(fde.initial_address())
    }

    /// The virtual address (SVMA) the file assigns to a file offset.
    ///
    /// Executable segments are tried first, from their page-aligned start:
    /// an executable mapping begins at the page holding its segment's
    /// first byte, which with lld's layout (each segment's address a page
    /// past its offset) also lies inside the read-only segment before it.
    pub fn svma_of_offset(&self, offset: u64) -> Option<u64> {
        let page_start = |off: u64| off & !0xfff;
        let inside = |&&(off, _, size, _): &&(u64, u64, u64, bool)| {
            offset >= page_start(off) && offset < off + size.max(1)
        };
        self.segments
            .iter()
            .filter(|s| s.3)
            .find(inside)
            .or_else(|| self.segments.iter().find(inside))
            .map(|&(off, vaddr, _, _)| (vaddr + offset).wrapping_sub(off))
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

/// The modules mapped by the processes the profiler tracks, by key.
///
/// An index stays valid until [`Modules::retain`] drops its module (no
/// process maps it any more); a later load may then reuse it, so whoever
/// keeps indices (the symbol cache) forgets the dropped ones.
///
/// Cloning is cheap (the modules are shared) and gives a snapshot that
/// keeps its modules' files open while the table moves on.
#[derive(Debug, Default, Clone)]
pub struct Modules {
    by_key: HashMap<Key, u32>,
    /// The same files by the (device, inode) of the opened file, since
    /// mmap2 records name a file by build id and /proc/PID/maps by inode.
    by_stat: HashMap<(u64, u64), u32>,
    modules: Vec<Arc<Module>>,
    /// Indices of dropped modules, for reuse.
    free: Vec<u32>,
}

impl Modules {
    /// The module at an index.
    pub fn get(&self, index: u32) -> &Module {
        &self.modules[index as usize]
    }

    /// The index of the vDSO's module, loaded the first time.
    pub fn vdso(&mut self) -> u32 {
        if let Some(&i) = self.by_key.get(&Key::Path(VDSO.to_string())) {
            return i;
        }
        let i = self.insert(load_vdso());
        self.by_key.insert(Key::Path(VDSO.to_string()), i);
        i
    }

    /// How many modules are loaded.
    pub fn len(&self) -> usize {
        self.modules.len() - self.free.len()
    }

    /// True when no module is loaded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&mut self, module: Module) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.modules[i as usize] = Arc::new(module);
                i
            }
            None => {
                self.modules.push(Arc::new(module));
                (self.modules.len() - 1) as u32
            }
        }
    }

    /// Gives back the pages unwinding touched in every module's file (see
    /// [`Module::release_pages`]).
    pub fn release_pages(&self) {
        for m in &self.modules {
            m.release_pages();
        }
    }

    /// Drops every module but the vDSO that `live` rejects, closing its
    /// file and unmapping it, and returns their indices and the paths
    /// they were read at (for the symbolizer to forget). The caller holds
    /// no frame of a dropped module: its index may be reused.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) -> Vec<(u32, Option<PathBuf>)> {
        let vdso = self.by_key.get(&Key::Path(VDSO.to_string())).copied();
        let free: HashSet<u32> = self.free.iter().copied().collect();
        let mut dropped = Vec::new();
        for (i, m) in self.modules.iter_mut().enumerate() {
            let i = i as u32;
            if Some(i) == vdso || live(i) || free.contains(&i) {
                continue;
            }
            let path = m.open_path();
            *m = Arc::new(Module::gone());
            dropped.push((i, path));
        }
        if !dropped.is_empty() {
            let gone: HashSet<u32> = dropped.iter().map(|d| d.0).collect();
            self.by_key.retain(|_, i| !gone.contains(i));
            self.by_stat.retain(|_, i| !gone.contains(i));
            self.free.extend(gone);
        }
        dropped
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
        let i = self.insert(module);
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
    // SAFETY: the file is mapped read-only and private; a process that
    // truncates a binary it is running would crash itself first, and a
    // module whose file changes is read again under its new build id.
    let map = file
        .as_ref()
        .and_then(|f| unsafe { memmap2::Mmap::map(f) }.ok());
    let map = map.map(Arc::new);
    let mut module = Module {
        path: path.to_string(),
        file,
        segments: Vec::new(),
        unwind: Arc::default(),
        symbols: Vec::new(),
        map: map.clone(),
    };
    if let Some(map) = map {
        read_elf(&mut module, map, false);
    }
    module
}

/// The vDSO, the kernel's small ELF image mapped into every process
/// (`clock_gettime`, `gettimeofday`): the same bytes in every process of
/// this kernel, so it is copied once from the agent's own memory. It has
/// no file, so its dynamic symbols are read here for naming.
fn load_vdso() -> Module {
    let mut module = Module {
        path: VDSO.to_string(),
        file: None,
        segments: Vec::new(),
        unwind: Arc::default(),
        symbols: Vec::new(),
        map: None,
    };
    // SAFETY: getauxval has no preconditions; AT_SYSINFO_EHDR is the
    // vDSO's load address, or 0 without one.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let len = maps.lines().find_map(|l| {
        let (range, rest) = l.split_once(' ')?;
        rest.ends_with("[vdso]").then_some(())?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        (a == base).then_some(b - a)
    });
    let (Some(len), true) = (len, base != 0) else {
        return module;
    };
    let Ok(mut copy) = memmap2::MmapMut::map_anon(len) else {
        return module;
    };
    // SAFETY: [base, base + len) is the vDSO mapping of this process, as
    // /proc/self/maps lists it: readable and alive for the process's life.
    copy.copy_from_slice(unsafe { std::slice::from_raw_parts(base as *const u8, len) });
    if let Ok(map) = copy.make_read_only() {
        read_elf(&mut module, Arc::new(map), true);
    }
    module
}

/// Fills a module's segments and unwind sections (and, with `symbols`,
/// its symbol table) from its ELF image.
fn read_elf(module: &mut Module, map: Arc<memmap2::Mmap>, symbols: bool) {
    let Ok(elf) = object::File::parse(&**map) else {
        return;
    };
    module.segments = elf
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            let exec = matches!(
                s.flags(),
                object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0
            );
            (off, s.address(), size, exec)
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
    if symbols {
        let mut syms: Vec<(u64, u64, String)> = elf
            .dynamic_symbols()
            .chain(elf.symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
            .filter_map(|s| {
                Some((
                    s.address(),
                    s.address() + s.size(),
                    s.name().ok()?.to_string(),
                ))
            })
            .collect();
        syms.sort();
        syms.dedup_by_key(|s| s.0);
        module.symbols = syms;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn module(segments: Vec<(u64, u64, u64, bool)>) -> Module {
        Module {
            path: "/x".into(),
            file: None,
            segments,
            unwind: Arc::default(),
            symbols: Vec::new(),
            map: None,
        }
    }

    #[test]
    fn an_lld_layout_maps_the_executable_segment_from_its_page() {
        // readelf -l of a binary linked by lld: the R segment covers the
        // page where the R E segment's bytes begin, at another address.
        let m = module(vec![
            (0, 0, 0xecb8c, false),
            (0xecb90, 0xedb90, 0x281e60, true),
        ]);
        // The executable mapping starts at file offset 0xec000.
        assert_eq!(m.svma_of_offset(0xec000), Some(0xed000));
        assert_eq!(m.svma_of_offset(0xecba0), Some(0xedba0));
        assert_eq!(m.base_avma(0x5555_5564_1000, 0xec000), 0x5555_5555_4000);
        assert_eq!(m.svma_of_offset(0x100), Some(0x100));
    }

    #[test]
    fn the_vdso_is_read_from_memory_and_names_clock_gettime() {
        let mut modules = Modules::default();
        let i = modules.vdso();
        let vdso = modules.get(i);
        assert!(vdso.unwind.eh_frame.is_some(), "no .eh_frame in {vdso:?}");
        let (start, _, name) = vdso
            .symbols
            .iter()
            .find(|s| s.2.contains("clock_gettime"))
            .unwrap_or_else(|| panic!("no clock_gettime in {:?}", vdso.symbols));
        let offset = vdso
            .segments
            .iter()
            .find(|s| *start >= s.1 && *start < s.1 + s.2 && s.3)
            .map(|s| start - s.1 + s.0)
            .unwrap();
        assert_eq!(vdso.symbol_at(offset + 1), Some(name.as_str()));
        assert_eq!(vdso.function_start(offset + 1), Some(*start));
        assert_eq!(modules.vdso(), i, "loaded once");
    }

    #[test]
    fn the_unwind_tables_say_where_each_function_starts_without_a_symbol_table() {
        // This test binary, read as any sampled file is; its symbol table
        // is only the reference the unwind tables are checked against.
        let exe = std::env::current_exe().unwrap();
        let m = load(exe.to_str().unwrap(), std::process::id());
        assert!(m.unwind.eh_frame_hdr.is_some(), "{}", exe.display());
        let data = std::fs::read(&exe).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let mut checked = 0;
        for sym in elf.symbols().filter(|s| {
            s.kind() == object::SymbolKind::Text
                && s.size() >= 32
                && s.name().is_ok_and(|n| n.contains("sonde_profile"))
        }) {
            let Some(&(off, vaddr, _, _)) = m
                .segments
                .iter()
                .find(|s| s.3 && sym.address() >= s.1 && sym.address() < s.1 + s.2)
            else {
                continue;
            };
            let offset = sym.address() - vaddr + off;
            for inside in [0, 1, sym.size() / 2, sym.size() - 1] {
                assert_eq!(
                    m.function_start(offset + inside),
                    Some(sym.address()),
                    "{:?} + {inside}",
                    sym.name()
                );
            }
            checked += 1;
        }
        assert!(checked >= 100, "only {checked} functions checked");
        // Past every function: nothing.
        assert_eq!(m.function_start(u64::MAX / 2), None);
    }
}
