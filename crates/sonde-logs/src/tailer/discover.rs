//! Where a tailer's files are: the include and exclude globs ([`Globs`]),
//! the directories they can match under ([`Root`]), and the walk of those
//! directories that a rescan starts from ([`Walk`]).

use std::collections::{HashMap, HashSet};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::DirEntryExt;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::config::{BuildError, TailerConfig};
use super::report::ScanError;
use crate::identity::FileId;

/// Where an include glob can match: the directory to walk and how deep.
pub(crate) struct Root {
    pub(crate) base: PathBuf,
    /// How many path components below `base` a match can be; `None` with
    /// `**`.
    pub(crate) depth: Option<usize>,
}

/// A tailer's globs: which paths it reads, and where to look for them.
pub(super) struct Globs {
    /// One per include pattern.
    roots: Vec<Root>,
    include: GlobSet,
    /// The exclude patterns with a `/`, matched against the whole path,
    /// and those without, matched against the file name.
    exclude_path: GlobSet,
    exclude_name: GlobSet,
}

/// What one walk of the roots found.
pub(super) struct Walk {
    /// The files that match, one path each, with their metadata.
    pub(super) found: Vec<(PathBuf, Metadata)>,
    /// Known files found at the paths they are known at
    /// ([`Tailer::rescan_quick`](crate::Tailer::rescan_quick)).
    pub(super) known: Vec<(PathBuf, FileId)>,
    /// The regular files that do not match, by the inode number their
    /// directory entry gives.
    pub(super) others: HashMap<u64, PathBuf>,
}

impl Globs {
    /// The globs of `config`.
    ///
    /// # Errors
    ///
    /// A glob that does not parse, a relative include pattern, or patterns
    /// too large to match together.
    pub(super) fn new(config: &TailerConfig) -> Result<Self, BuildError> {
        let glob = |pattern: &str| {
            GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|source| BuildError::Glob {
                    pattern: pattern.to_owned(),
                    error: source,
                })
        };
        let set = |b: GlobSetBuilder| b.build().map_err(BuildError::Set);
        let mut include = GlobSetBuilder::new();
        let mut roots = Vec::new();
        for pattern in &config.include {
            if !Path::new(pattern).is_absolute() {
                return Err(BuildError::Relative {
                    pattern: pattern.clone(),
                });
            }
            include.add(glob(pattern)?);
            roots.push(root_of(pattern));
        }
        let (mut exclude_path, mut exclude_name) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        for pattern in &config.exclude {
            if pattern.contains('/') {
                exclude_path.add(glob(pattern)?);
            } else {
                exclude_name.add(glob(pattern)?);
            }
        }
        Ok(Self {
            roots,
            include: set(include)?,
            exclude_path: set(exclude_path)?,
            exclude_name: set(exclude_name)?,
        })
    }

    /// Whether `path` matches an include glob and no exclude glob.
    pub(super) fn matches(&self, path: &Path) -> bool {
        self.include.is_match(path)
            && !self.exclude_path.is_match(path)
            && !path
                .file_name()
                .is_some_and(|name| self.exclude_name.is_match(name))
    }

    /// The regular files under the roots that match, one path per file.
    /// With `quick`, a regular file's entry is first looked up with `known_at`
    /// (the file the tailer knows at that path, open or idle): if it names
    /// the same inode, the file is taken as known, without a `stat` or a
    /// glob match.
    pub(super) fn walk(
        &self,
        errors: &mut Vec<ScanError>,
        quick: bool,
        known_at: impl Fn(&Path) -> Option<FileId>,
    ) -> Walk {
        let mut out: Vec<(PathBuf, Metadata)> = Vec::new();
        let mut known = Vec::new();
        let mut others = HashMap::new();
        let mut ids = HashSet::new();
        let mut dirs_seen = HashSet::new();
        for root in &self.roots {
            let mut stack = vec![(root.base.clone(), root.depth)];
            while let Some((dir, depth)) = stack.pop() {
                if !dirs_seen.insert((dir.clone(), depth)) {
                    continue;
                }
                let entries = match fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    // A directory that does not exist yet may come later.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(source) => {
                        errors.push(ScanError::ReadDir {
                            path: dir,
                            error: source,
                        });
                        continue;
                    }
                };
                // In name order, each name taken once: a sort by a key
                // made per comparison would allocate it every time.
                let mut names: Vec<_> = entries.filter_map(Result::ok).collect();
                names.sort_by_cached_key(|e| e.file_name());
                for entry in names {
                    let path = entry.path();
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    if kind.is_dir() {
                        // Symbolic links to directories are not followed, so
                        // a link loop cannot trap the walk.
                        match depth {
                            None => stack.push((path, None)),
                            Some(d) if d > 1 => stack.push((path, Some(d - 1))),
                            Some(_) => {}
                        }
                        continue;
                    }
                    if quick && kind.is_file() {
                        if let Some(id) = known_at(&path).filter(|id| id.ino == entry.ino()) {
                            if ids.insert(id) {
                                known.push((path, id));
                            }
                            continue;
                        }
                    }
                    if !self.matches(&path) {
                        // The directory entry's inode, no stat: where an
                        // idle file renamed out of the globs went.
                        if kind.is_file() {
                            others.insert(entry.ino(), path);
                        }
                        continue;
                    }
                    // Follows a symbolic link to the file it names.
                    let Ok(meta) = fs::metadata(&path) else {
                        continue;
                    };
                    if meta.is_file() && ids.insert(FileId::of(&meta)) {
                        out.push((path, meta));
                    }
                }
            }
        }
        Walk {
            found: out,
            known,
            others,
        }
    }
}

/// The directory to walk for `pattern` (its components before the first
/// one with a glob character) and how deep below it matches can be.
pub(crate) fn root_of(pattern: &str) -> Root {
    let is_glob = |c: &str| c.contains(['*', '?', '[', '{']);
    let components: Vec<&str> = Path::new(pattern)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let literal = components
        .iter()
        .position(|c| is_glob(c))
        .unwrap_or(components.len().saturating_sub(1));
    let mut base = PathBuf::from("/");
    base.extend(&components[..literal]);
    let rest = &components[literal..];
    Root {
        base,
        depth: (!rest.iter().any(|c| c.contains("**"))).then_some(rest.len()),
    }
}

#[cfg(test)]
mod tests;
