//! Where each file is: the checkpoints to save (the offset after each
//! file's last acknowledged line), the positions (the offset after its
//! last line read), and [`Tailer::advance`], which takes up positions a
//! sink stored further on.

use super::gzip::Gz;
use super::report::FileKey;
use super::Tailer;
use crate::checkpoint::{Checkpoints, FileCheckpoint};
use crate::identity::{read_head, Identity};

impl Tailer {
    /// The checkpoints to save: per open file, its identity, path and the
    /// offset after its last acknowledged line; and the checkpoints given to
    /// [`Tailer::new`] that no rescan has matched or dropped yet.
    pub fn checkpoints(&self) -> Checkpoints {
        let open = self.files.iter().map(|w| w.checkpoint(w.acked));
        Checkpoints {
            files: open
                .chain(self.idle_checkpoints())
                .chain(self.restored.values().cloned())
                .collect(),
        }
    }

    /// Changes whenever [`Tailer::checkpoints`] may differ from the last
    /// call by more than the offsets of open files (a file found, closed,
    /// gone idle, moved, truncated or advanced): while it stays the same,
    /// [`Tailer::open_checkpoints`] holds every checkpoint that changed.
    pub fn layout(&self) -> u64 {
        self.layout
    }

    /// The checkpoints of the open files alone; see [`Tailer::layout`].
    pub fn open_checkpoints(&self) -> Vec<FileCheckpoint> {
        self.files.iter().map(|w| w.checkpoint(w.acked)).collect()
    }

    fn idle_checkpoints(&self) -> impl Iterator<Item = FileCheckpoint> + '_ {
        self.idle.iter().map(|(&id, f)| FileCheckpoint {
            identity: Identity { id, head: f.head },
            path: f.path.to_string_lossy().into_owned(),
            offset: f.offset,
        })
    }

    /// The checkpoints as if every line handed out so far were
    /// acknowledged: per open file, the offset after its last complete
    /// line read (a waiting partial line is not counted), and the restored
    /// checkpoints no rescan has taken up yet. A sink that stores offsets
    /// together with the lines it delivered (Kafka transactions) saves
    /// these, taken right after the lines it holds were read.
    pub fn positions(&self) -> Checkpoints {
        let open = self.files.iter().map(|w| {
            let read = (w.joining.start())
                .or(w.splitter.waiting())
                .unwrap_or(w.splitter.offset());
            w.checkpoint(read)
        });
        Checkpoints {
            files: open
                .chain(self.idle_checkpoints())
                .chain(self.restored.values().cloned())
                .collect(),
        }
    }

    /// Takes up `checkpoints` that are further on than this tailer: offsets
    /// a sink stored together with the lines it delivered (Kafka
    /// transactions), which may be ahead of the checkpoint file. For each
    /// checkpoint naming an open file (same device and inode, and a head
    /// that still matches) at an offset within the file, the lines before
    /// that offset count as acknowledged, and reading skips to it if it is
    /// not there yet. Returns those files and offsets: lines of them read
    /// already and starting below the offset were delivered before, and the
    /// caller drops them. Checkpoints naming no open file change nothing
    /// (before the first rescan they are kept for it).
    pub fn advance(&mut self, checkpoints: &Checkpoints) -> Vec<(FileKey, u64)> {
        self.layout += 1;
        let mut floors = Vec::new();
        for c in &checkpoints.files {
            let Some(w) = self.files.iter_mut().find(|w| w.id == c.identity.id) else {
                // An idle file was read to its end and every line of it
                // acknowledged: no stored position is ahead of it.
                if !self.scanned && !self.idle.contains_key(&c.identity.id) {
                    let ahead = self
                        .restored
                        .get(&c.identity.id)
                        .is_none_or(|r| r.identity != c.identity || r.offset < c.offset);
                    if ahead {
                        self.restored.insert(c.identity.id, c.clone());
                    }
                }
                continue;
            };
            let Ok(head) = read_head(&w.file, &mut self.head_buf) else {
                continue;
            };
            if c.identity.recognise(w.id, head).is_none() {
                continue;
            }
            let size = w.file.metadata().map_or(0, |m| m.len());
            if (c.offset > size && w.gz.is_none()) || c.offset <= w.acked {
                continue;
            }
            if c.offset > w.splitter.offset() {
                w.splitter.reset(c.offset);
                if let Some(gz) = &mut w.gz {
                    *gz = Gz::new(c.offset);
                }
            }
            w.acked = c.offset;
            w.joining.drop_below(c.offset);
            floors.push((w.key, c.offset));
        }
        floors
    }
}

#[cfg(test)]
mod tests;
