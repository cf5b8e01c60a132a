//! The cache's errors: opening it, its files on disk, and its lookups.

use super::disk::DiskFilesError;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// foyer's error prints its own causes, so it is not exposed as this error's source
    /// (a chain printer would repeat them).
    #[error("cannot open the disk cache in {dir} (config key cache.dir): {cause}")]
    Open { dir: String, cause: foyer::Error },
    #[error(transparent)]
    Files(#[from] DiskFilesError),
    #[error("cache lookup failed: {0}")]
    Lookup(foyer::Error),
    #[error("cache held a value of the wrong kind for a {0} key")]
    WrongKind(&'static str),
    #[error("a block of {got} bytes where {expected} were expected")]
    BlockLength { expected: usize, got: usize },
    #[error("bytes {start}..{end} are not within a block of {block_len} bytes")]
    OutsideBlock {
        start: usize,
        end: usize,
        block_len: usize,
    },
}

/// A failed block lookup: the fetch's own error, or the cache's.
#[derive(Debug)]
pub enum LookupError<E> {
    Fetch(E),
    Cache(CacheError),
}
