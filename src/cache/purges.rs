//! Purge generations: how often each object was purged, kept in a journal next to the
//! disk tier's data file so a purge holds across restarts.
//!
//! foyer forgets a removed entry in memory only: after a restart its recovery finds the
//! entry on disk again. So a purge does not rely on removal. Every cache key carries the
//! object's purge generation, and a purge raises it (journaled and synced before the
//! purge returns): entries written under an older generation are never looked up again,
//! and the disk tier reclaims them in its own time.
//!
//! Invariants:
//! - The journal is a sequence of 16-byte records (object hash, generation), little
//!   endian; the last record of an object wins. A torn final record is ignored.
//! - Objects are identified by a 64-bit hash of bucket and key. Two objects that share a
//!   hash share a generation: purging one only costs the other a fetch.
//! - The journal belongs to the data file's layout: it is removed with it when the tier
//!   is reset (`disk::prepare`), and grows by one record per purged object.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::types::ObjectRef;

/// The journal file in `cache.dir`.
pub const JOURNAL_FILE: &str = "portico-purges";
const RECORD_BYTES: usize = 16;

pub struct Purges {
    generations: Mutex<HashMap<u64, u64>>,
    /// Appended to on every purge; `None` for a memory-only cache.
    journal: Option<Mutex<std::fs::File>>,
    path: Option<PathBuf>,
}

/// The hash an object's generation is kept under: bucket and key, never a pinned version
/// (a purge covers every version). SHA-256, so the journal means the same to every build.
fn object_hash(object: &ObjectRef) -> u64 {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(object.bucket().as_bytes());
    // Bucket names cannot hold a NUL: the key starts after the first one.
    hasher.update([0]);
    hasher.update(object.key().as_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

impl Purges {
    /// Generations held in memory only (a cache without a disk tier).
    pub fn in_memory() -> Self {
        Self {
            generations: Mutex::new(HashMap::new()),
            journal: None,
            path: None,
        }
    }

    /// Opens (or creates) the journal in `dir` and loads the generations it records.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(error),
        };
        let mut generations = HashMap::new();
        for record in bytes.chunks_exact(RECORD_BYTES) {
            let (hash, generation) = record.split_at(8);
            let hash = u64::from_le_bytes(hash.try_into().expect("8 bytes"));
            let generation = u64::from_le_bytes(generation.try_into().expect("8 bytes"));
            generations.insert(hash, generation);
        }
        let whole = bytes.len() - bytes.len() % RECORD_BYTES;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)?;
        // A record torn by a crash is cut off, so the next one starts on a boundary.
        file.set_len(whole as u64)?;
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        Ok(Self {
            generations: Mutex::new(generations),
            journal: Some(Mutex::new(file)),
            path: Some(path),
        })
    }

    /// The object's current generation: 0 until it is first purged.
    pub fn generation(&self, object: &ObjectRef) -> u64 {
        let generations = self.generations.lock();
        if generations.is_empty() {
            return 0;
        }
        generations.get(&object_hash(object)).copied().unwrap_or(0)
    }

    /// Raises the object's generation and records it durably.
    pub fn purge(&self, object: &ObjectRef) -> std::io::Result<u64> {
        let hash = object_hash(object);
        let mut generations = self.generations.lock();
        let generation = generations.get(&hash).copied().unwrap_or(0) + 1;
        if let Some(journal) = &self.journal {
            let mut record = [0u8; RECORD_BYTES];
            record[..8].copy_from_slice(&hash.to_le_bytes());
            record[8..].copy_from_slice(&generation.to_le_bytes());
            let mut file = journal.lock();
            file.write_all(&record)?;
            file.sync_data()?;
        }
        generations.insert(hash, generation);
        Ok(generation)
    }

    /// The journal's path, for messages.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_survive_a_reopen_and_a_torn_record() {
        let dir = tempfile::tempdir().unwrap();
        let object = ObjectRef::new("bucket", "a/b").unwrap();
        let other = ObjectRef::new("bucket", "a/c").unwrap();
        let pinned = object.clone().with_version(Some("v1")).unwrap();
        {
            let purges = Purges::open(dir.path()).unwrap();
            assert_eq!(purges.generation(&object), 0);
            assert_eq!(purges.purge(&object).unwrap(), 1);
            assert_eq!(purges.purge(&object).unwrap(), 2);
            assert_eq!(purges.generation(&pinned), 2, "every version is purged");
            assert_eq!(purges.generation(&other), 0);
        }
        // A crash in the middle of a record.
        let path = dir.path().join(JOURNAL_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, bytes).unwrap();
        let purges = Purges::open(dir.path()).unwrap();
        assert_eq!(purges.generation(&object), 2);
        assert_eq!(purges.purge(&other).unwrap(), 1);
        drop(purges);
        let purges = Purges::open(dir.path()).unwrap();
        assert_eq!(
            (purges.generation(&object), purges.generation(&other)),
            (2, 1)
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * 16);
    }

    #[test]
    fn a_memory_only_cache_counts_generations_without_a_file() {
        let purges = Purges::in_memory();
        let object = ObjectRef::new("bucket", "k").unwrap();
        assert_eq!(purges.purge(&object).unwrap(), 1);
        assert_eq!(purges.generation(&object), 1);
        assert_eq!(purges.path(), None);
    }
}
