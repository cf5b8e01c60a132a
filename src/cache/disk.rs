//! The disk tier's files in `cache.dir`: one data file however large the tier is, and a
//! format file that says how the data file is laid out.
//!
//! Invariants:
//! - The number of files (and open descriptors) does not grow with `cache.disk_capacity`:
//!   foyer's engine blocks are regions of one data file, not files of their own.
//! - A data file is only reopened under the layout that wrote it. When the format file is
//!   missing, unreadable or names another layout (format version, cache block size, engine
//!   block size, capacity), the data file and any files of an older layout are removed
//!   and the tier starts empty. The cache is disposable; a wrong byte is not.
//! - A capacity the file system cannot hold is refused at start, naming the key, the free
//!   space and the largest value that fits: a sparse data file larger than its file
//!   system would fail its writes later, when the disk is full.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::layout::{DiskLayout, piece_bytes};

/// The on-disk format. 1 was foyer's `FsDevice` (one file per engine block); 2 is one data
/// file of whole blocks; 3 is one data file of block pieces; 4 is 3 with foyer's entry
/// checksums in CRC-64/NVME instead of XxHash64 (vendor/README.md). Bump it whenever what
/// the data file holds changes meaning.
pub const FORMAT_VERSION: u32 = 4;
/// The data file: every engine block of the tier at its offset.
pub const DATA_FILE: &str = "portico-blocks";
/// The layout the data file was written with, as `key = value` lines.
pub const FORMAT_FILE: &str = "portico-disk-format";
/// Files of format 1, one per engine block.
const FORMAT_1_PREFIX: &str = "foyer-storage-direct-fs-";

/// What the format file records: everything that decides where an entry lies in the data
/// file and what its bytes mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFormat {
    pub version: u32,
    pub block_size: u64,
    pub piece_bytes: u64,
    pub engine_block_bytes: u64,
    pub capacity: u64,
}

impl DiskFormat {
    pub fn new(block_size: u64, capacity: u64) -> Self {
        Self {
            version: FORMAT_VERSION,
            block_size,
            piece_bytes: piece_bytes(block_size),
            engine_block_bytes: DiskLayout::new(block_size, capacity).engine_block_bytes,
            capacity,
        }
    }

    fn render(&self) -> String {
        format!(
            "# Portico disk tier layout; the data file is only reused under this layout.\n\
             format = {}\nblock_size = {}\npiece_bytes = {}\nengine_block_bytes = {}\n\
             capacity = {}\n",
            self.version, self.block_size, self.piece_bytes, self.engine_block_bytes, self.capacity
        )
    }

    fn parse(text: &str) -> Option<Self> {
        let field = |name: &str| {
            text.lines()
                .filter_map(|line| line.split_once('='))
                .find(|(key, _)| key.trim() == name)
                .and_then(|(_, value)| value.trim().parse::<u64>().ok())
        };
        Some(Self {
            version: u32::try_from(field("format")?).ok()?,
            block_size: field("block_size")?,
            // Format 2 had no pieces: it parses, and differs in its version.
            piece_bytes: field("piece_bytes").unwrap_or(0),
            engine_block_bytes: field("engine_block_bytes")?,
            capacity: field("capacity")?,
        })
    }

    /// Why a data file written under `self` cannot be reused under `wanted`.
    fn mismatch(&self, wanted: &Self) -> Option<String> {
        let differs = |what: &str, old: u64, new: u64| {
            (old != new).then(|| format!("{what} changed from {old} to {new}"))
        };
        differs("format", self.version.into(), wanted.version.into())
            .or_else(|| differs("cache.block_size", self.block_size, wanted.block_size))
            .or_else(|| differs("the piece size", self.piece_bytes, wanted.piece_bytes))
            .or_else(|| {
                differs(
                    "the engine block size",
                    self.engine_block_bytes,
                    wanted.engine_block_bytes,
                )
            })
            .or_else(|| differs("cache.disk_capacity", self.capacity, wanted.capacity))
    }
}

/// A start-up failure of the disk tier's files, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum DiskFilesError {
    #[error("config key cache.dir: cannot use {dir}")]
    Dir { dir: String, source: std::io::Error },
    #[error(
        "config key cache.disk_capacity: {capacity} bytes do not fit in {dir}: its file system has {free} bytes free{held}; set cache.disk_capacity to at most {fits} (for example \"{example}\"), or free space"
    )]
    TooLarge {
        dir: String,
        capacity: u64,
        free: u64,
        held: String,
        fits: u64,
        example: String,
    },
}

impl DiskFilesError {
    /// `source` met while using `dir` (or a file in it).
    pub fn dir(dir: &Path, source: std::io::Error) -> Self {
        Self::Dir {
            dir: dir.display().to_string(),
            source,
        }
    }
}

/// The data file to open, once `dir` is ready for `wanted`.
#[derive(Debug)]
pub struct PreparedDisk {
    pub data_file: PathBuf,
    /// Why the tier starts empty, when it had files it could not reuse.
    pub reset: Option<String>,
}

/// Makes `dir` ready for a disk tier of `wanted`: removes files it cannot reuse, checks
/// that the capacity fits the file system, reserves it there when `preallocate` (see
/// [`reserve`]), and records the layout.
pub fn prepare(
    dir: &Path,
    wanted: &DiskFormat,
    preallocate: bool,
) -> Result<PreparedDisk, DiskFilesError> {
    let dir_error = |source| DiskFilesError::dir(dir, source);
    std::fs::create_dir_all(dir).map_err(dir_error)?;
    let data_file = dir.join(DATA_FILE);
    let format_file = dir.join(FORMAT_FILE);
    let recorded = match std::fs::read_to_string(&format_file) {
        Ok(text) => Some(DiskFormat::parse(&text)),
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => return Err(dir_error(error)),
    };
    // Rewritten only when it changes: a restart on a file system that is full (the data
    // file holds its room) must not need a byte more of it.
    let unchanged = matches!(&recorded, Some(Some(recorded)) if recorded == wanted);
    let format_1_files = format_1_files(dir).map_err(dir_error)?;
    let data_exists = data_file.exists();
    let reset = match recorded {
        Some(Some(recorded)) => recorded.mismatch(wanted),
        Some(None) => Some(format!("{FORMAT_FILE} is unreadable")),
        None if data_exists => Some(format!("{FORMAT_FILE} is missing")),
        None => None,
    }
    .or_else(|| {
        (!format_1_files.is_empty()).then(|| {
            format!(
                "{} files of format 1 (one per engine block) are replaced by one data file",
                format_1_files.len()
            )
        })
    });
    if reset.is_some() {
        let journal = dir.join(super::purges::JOURNAL_FILE);
        for file in format_1_files
            .iter()
            .chain([&data_file, &format_file, &journal])
        {
            match std::fs::remove_file(file) {
                Ok(()) => {}
                Err(error) if error.kind() == ErrorKind::NotFound => {}
                Err(error) => return Err(dir_error(error)),
            }
        }
    }
    check_fits(dir, &data_file, wanted.capacity)?;
    if preallocate {
        reserve(&data_file, wanted.capacity).map_err(dir_error)?;
    }
    if reset.is_some() || !unchanged {
        write_format(&format_file, wanted).map_err(dir_error)?;
    }
    Ok(PreparedDisk { data_file, reset })
}

fn format_1_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(FORMAT_1_PREFIX)
        {
            files.push(entry.path());
        }
    }
    Ok(files)
}

/// Written to a temporary name and renamed, so a crash leaves the old file or the new one.
fn write_format(path: &Path, format: &DiskFormat) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, format.render())?;
    std::fs::rename(&temporary, path)
}

/// Allocates the data file's `capacity` bytes on its file system. A sparse file takes its
/// blocks as the tier first writes them, and a file system that something else filled in
/// the meantime then fails those writes, which the disk engine does not survive (its
/// flusher panics on a write error); a reserved file is never short of room. File
/// systems that cannot allocate ahead keep the file sparse, with a warning.
pub fn reserve(data_file: &Path, capacity: u64) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(data_file)?;
    match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, capacity) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => {
            tracing::warn!(
                file = %data_file.display(),
                "the file system cannot reserve the disk tier's capacity ahead: the data file stays sparse, and a full file system stops the tier"
            );
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// Refuses a capacity larger than the free space plus what the data file already holds.
fn check_fits(dir: &Path, data_file: &Path, capacity: u64) -> Result<(), DiskFilesError> {
    use std::os::unix::fs::MetadataExt;
    let stats = rustix::fs::statvfs(dir).map_err(|error| DiskFilesError::dir(dir, error.into()))?;
    let free = stats.f_bavail.saturating_mul(stats.f_frsize);
    let held = std::fs::metadata(data_file).map_or(0, |meta| meta.blocks().saturating_mul(512));
    let room = free.saturating_add(held);
    if capacity <= room {
        return Ok(());
    }
    // Leave a little for the file system; round down to whole GiB (MiB when small).
    let leave = room / 100 * 95;
    let unit = if leave >= 1 << 30 { 1 << 30 } else { 1 << 20 };
    let fits = leave / unit * unit;
    Err(DiskFilesError::TooLarge {
        dir: dir.display().to_string(),
        capacity,
        free,
        held: if held > 0 {
            format!(" and the data file holds {held} bytes")
        } else {
            String::new()
        },
        fits,
        example: crate::config::ByteSize(fits).to_string(),
    })
}

/// Raises the soft limit on open files to the hard limit, so a busy proxy is not stopped
/// by a default soft limit of 1024. Returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let Some(hard) = limit.maximum else {
        return limit.current;
    };
    if limit.current.is_some_and(|soft| soft >= hard) {
        return limit.current;
    }
    let raised = rustix::process::Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Some(hard),
        Err(error) => {
            tracing::warn!(%error, soft = ?limit.current, hard, "cannot raise the open-file limit (ulimit -n) to its hard limit");
            limit.current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::layout::PIECE_BYTES;

    #[test]
    fn the_format_file_round_trips_and_names_what_changed() {
        let format = DiskFormat::new(4 << 20, 10 << 30);
        assert_eq!(DiskFormat::parse(&format.render()), Some(format.clone()));
        assert_eq!(format.mismatch(&format), None);
        let smaller_blocks = DiskFormat::new(1 << 20, 10 << 30);
        assert_eq!(
            format.mismatch(&smaller_blocks).unwrap(),
            "cache.block_size changed from 4194304 to 1048576"
        );
        let larger = DiskFormat::new(4 << 20, 20 << 30);
        assert!(
            format
                .mismatch(&larger)
                .unwrap()
                .starts_with("cache.disk_capacity changed")
        );
        let older = DiskFormat {
            version: 1,
            ..format.clone()
        };
        assert_eq!(
            older.mismatch(&format).unwrap(),
            "format changed from 1 to 4"
        );
        // A format 2 file (whole blocks, no piece size) is read, and replaced.
        let format_2 = "format = 2\nblock_size = 4194304\nengine_block_bytes = 71319552\ncapacity = 10737418240\n";
        assert_eq!(
            DiskFormat::parse(format_2)
                .unwrap()
                .mismatch(&format)
                .unwrap(),
            "format changed from 2 to 4"
        );
        // A format 3 file (pieces whose foyer checksums are XxHash64) is replaced too.
        let format_3 = format.render().replace("format = 4", "format = 3");
        assert_eq!(
            DiskFormat::parse(&format_3)
                .unwrap()
                .mismatch(&format)
                .unwrap(),
            "format changed from 3 to 4"
        );
        assert_eq!(format.piece_bytes, PIECE_BYTES);
        assert_eq!(DiskFormat::new(64 << 10, 10 << 30).piece_bytes, 64 << 10);
        assert_eq!(DiskFormat::parse("format = 2\nblock_size = x\n"), None);
    }

    #[test]
    fn a_reserved_tier_holds_its_capacity_and_an_unchanged_format_is_not_written_again() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let wanted = DiskFormat::new(64 * 1024, 8 << 20);
        let prepared = prepare(dir.path(), &wanted, true).unwrap();
        let data = std::fs::metadata(&prepared.data_file).unwrap();
        assert!(
            data.blocks() * 512 >= 8 << 20,
            "{} bytes allocated",
            data.blocks() * 512
        );
        // The same layout again: the format file is left as it was (a full file system
        // has no room for a new one).
        let format_file = dir.path().join(FORMAT_FILE);
        let written = std::fs::metadata(&format_file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        prepare(dir.path(), &wanted, true).unwrap();
        assert_eq!(
            std::fs::metadata(&format_file).unwrap().modified().unwrap(),
            written
        );
    }

    #[test]
    fn files_of_another_layout_are_removed_and_the_same_layout_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let wanted = DiskFormat::new(64 * 1024, 8 << 20);
        // Format 1: one file per engine block, no format file.
        for id in 0..3 {
            std::fs::write(dir.path().join(format!("{FORMAT_1_PREFIX}{id:08}")), b"old").unwrap();
        }
        let prepared = prepare(dir.path(), &wanted, false).unwrap();
        assert!(prepared.reset.unwrap().contains("3 files of format 1"));
        assert_eq!(format_1_files(dir.path()).unwrap(), Vec::<PathBuf>::new());
        std::fs::write(&prepared.data_file, b"entries").unwrap();
        // The same layout again: the data file stays.
        let again = prepare(dir.path(), &wanted, false).unwrap();
        assert_eq!(again.reset, None);
        assert_eq!(std::fs::read(&again.data_file).unwrap(), b"entries");
        // Another block size: the data file goes.
        let other = prepare(dir.path(), &DiskFormat::new(128 * 1024, 8 << 20), false).unwrap();
        assert!(other.reset.unwrap().contains("cache.block_size"));
        assert!(!other.data_file.exists());
        // A data file without a format file is not trusted either.
        std::fs::write(&other.data_file, b"entries").unwrap();
        std::fs::remove_file(dir.path().join(FORMAT_FILE)).unwrap();
        let orphan = prepare(dir.path(), &wanted, false).unwrap();
        assert_eq!(orphan.reset.unwrap(), format!("{FORMAT_FILE} is missing"));
        assert!(!orphan.data_file.exists());
    }

    #[test]
    fn a_capacity_the_file_system_cannot_hold_is_refused_with_the_largest_that_fits() {
        let dir = tempfile::tempdir().unwrap();
        let error = prepare(dir.path(), &DiskFormat::new(4 << 20, u64::MAX / 2), true).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("config key cache.disk_capacity: "),
            "{message}"
        );
        assert!(
            message.contains("set cache.disk_capacity to at most"),
            "{message}"
        );
        let DiskFilesError::TooLarge { fits, example, .. } = error else {
            panic!("{message}");
        };
        assert!(fits > 0 && fits < u64::MAX / 2);
        // The suggested value is one the configuration accepts and that fits.
        let parsed: crate::config::ByteSize = example.parse().unwrap();
        assert!(parsed.bytes() <= fits);
        prepare(dir.path(), &DiskFormat::new(4 << 20, parsed.bytes()), false).unwrap();
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{Resource, getrlimit};
        let after = raise_open_file_limit();
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(after, limit.current);
        if let Some(hard) = limit.maximum {
            assert_eq!(limit.current, Some(hard));
        }
    }
}
