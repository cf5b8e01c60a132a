//! The device ceiling: how fast the disk under the cache directory serves random reads
//! of the disk tier's piece size with `O_DIRECT`, the way Portico's disk tier reads (no
//! page cache), from as many threads as the benchmark has clients. A disk tier cannot
//! serve bytes from disk faster than this; a server reading from the page cache (nginx's
//! `proxy_cache`) does not touch the device at all when its files fit in free memory.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;

/// `len` bytes of `buffer` (which must have `len + PAGE`) starting on a page boundary,
/// as `O_DIRECT` needs.
fn page_aligned(buffer: &mut [u8], len: usize) -> &mut [u8] {
    let offset = buffer.as_ptr().align_offset(PAGE);
    &mut buffer[offset..offset + len]
}

/// Writes a `file_bytes` file of random bytes in `dir`, syncs it, then reads random
/// `read_bytes` ranges of it (page-aligned) with `O_DIRECT` from `threads` threads for
/// `duration`; MiB/s. The file is removed.
pub fn random_read_mib_per_sec(
    dir: &Path,
    file_bytes: u64,
    read_bytes: usize,
    threads: usize,
    duration: Duration,
) -> f64 {
    let path = dir.join("device-ceiling.bin");
    {
        let mut file = std::io::BufWriter::new(File::create(&path).expect("device file"));
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut chunk = vec![0u8; 1 << 20];
        for _ in 0..file_bytes.div_ceil(chunk.len() as u64) {
            rng.fill(chunk.as_mut_slice());
            file.write_all(&chunk).expect("write device file");
        }
        file.into_inner()
            .expect("flush device file")
            .sync_all()
            .expect("sync device file");
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&path)
        .expect("open the device file with O_DIRECT");
    let pages = (file_bytes - read_bytes as u64) / PAGE as u64;
    let started = Instant::now();
    let read: u64 = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..threads)
            .map(|thread| {
                let file = &file;
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(thread as u64);
                    let mut buffer = vec![0u8; read_bytes + PAGE];
                    let buffer = page_aligned(&mut buffer, read_bytes);
                    let mut read = 0;
                    while started.elapsed() < duration {
                        let offset = rng.random_range(0..pages) * PAGE as u64;
                        file.read_exact_at(buffer, offset).expect("O_DIRECT read");
                        read += read_bytes as u64;
                    }
                    read
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| reader.join().expect("reader"))
            .sum()
    });
    let elapsed = started.elapsed();
    std::fs::remove_file(&path).ok();
    read as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
}
