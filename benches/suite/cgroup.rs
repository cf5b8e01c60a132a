//! A memory cgroup of the benchmark's own: a bound on what the processes started in it
//! may hold in memory, their page cache included. It lets a server that caches in the
//! page cache (nginx's `proxy_cache`) run with the memory budget Portico has, so that a
//! working set larger than that budget is larger than its memory too, as on a machine
//! whose RAM the set exceeds.
//!
//! Both cgroup versions work: v1's memory hierarchy (`memory.limit_in_bytes`) and v2's
//! unified one (`memory.max`). Creating a cgroup takes root (or a delegated subtree);
//! where that fails, [`MemoryCgroup::create`] says why and the caller runs without it.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct MemoryCgroup {
    dir: PathBuf,
    pub limit_bytes: u64,
}

impl MemoryCgroup {
    /// A new cgroup named `name` under this process's own memory cgroup, limited to
    /// `limit_bytes`; the reason when the kernel offers none this process may create.
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self, String> {
        let membership = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|error| format!("/proc/self/cgroup: {error}"))?;
        let (parent, limit_file) = own_memory_cgroup(&membership)
            .ok_or_else(|| "no memory cgroup controller is mounted".to_owned())?;
        let dir = parent.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
        let cgroup = Self { dir, limit_bytes };
        std::fs::write(cgroup.dir.join(limit_file), limit_bytes.to_string())
            .map_err(|error| format!("limit {}: {error}", cgroup.dir.display()))?;
        Ok(cgroup)
    }

    /// `program` with `args`, started inside the cgroup: a shell joins it, then becomes
    /// the program (same pid), so every process it forks is counted from its first page.
    pub fn command(&self, program: &str, args: &[String]) -> Command {
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg(program)
            .args(args);
        command
    }

    /// The most memory the cgroup held, page cache included, where the kernel tells
    /// (v1's `memory.max_usage_in_bytes`, v2's `memory.peak`).
    pub fn peak_bytes(&self) -> Option<u64> {
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|file| std::fs::read_to_string(self.dir.join(file)).ok())
            .and_then(|text| text.trim().parse().ok())
    }
}

impl Drop for MemoryCgroup {
    /// Removes the cgroup; its processes must have exited (the page cache they left is
    /// handed to the parent by the kernel).
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir(&self.dir) {
            eprintln!("remove cgroup {}: {error}", self.dir.display());
        }
    }
}

/// The directory of this process's memory cgroup and the name of its limit file, from
/// `/proc/self/cgroup`'s lines (`id:controllers:path`): v1's `memory` hierarchy where it
/// is mounted, else v2's unified one where it has the memory controller.
fn own_memory_cgroup(membership: &str) -> Option<(PathBuf, &'static str)> {
    let root = Path::new("/sys/fs/cgroup");
    let path_of = |wanted: &dyn Fn(&str) -> bool| {
        membership.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(controllers).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    if let Some(path) = path_of(&|controllers| controllers.split(',').any(|c| c == "memory")) {
        let dir = root.join("memory").join(path);
        if dir.join("memory.limit_in_bytes").exists() {
            return Some((dir, "memory.limit_in_bytes"));
        }
    }
    let path = path_of(&|controllers| controllers.is_empty())?;
    let dir = root.join(path);
    let controllers = std::fs::read_to_string(dir.join("cgroup.subtree_control")).ok()?;
    controllers
        .split_whitespace()
        .any(|c| c == "memory")
        .then_some((dir, "memory.max"))
}
