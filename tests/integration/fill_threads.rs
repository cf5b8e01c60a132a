//! Fills on threads of their own (`upstream.fill_nice`): a node runs one `portico-fill`
//! thread per core at the nice value configured, a cold read spends its fill's CPU on
//! them and serves exact bytes, and hits leave them idle. With `fill_nice = 0` they run
//! at the serving threads' priority.

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;
const FILL_THREAD: &str = "portico-fill";

/// A thread of the node: its name, nice value and CPU time (user + system, in ticks).
#[derive(Debug)]
struct Thread {
    name: String,
    nice: i64,
    ticks: u64,
}

impl Thread {
    /// From a `stat` file of `/proc`.
    fn parse(stat: &str) -> Self {
        let (open, close) = (stat.find('(').expect("("), stat.rfind(')').expect(")"));
        // The fields after the name, from field 3 (state) on.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let number = |field: usize| -> i64 { fields[field - 3].parse().expect("a number") };
        Self {
            name: stat[open + 1..close].to_owned(),
            nice: number(19),
            ticks: (number(14) + number(15)) as u64,
        }
    }
}

/// The node's threads, from `/proc/<pid>/task/*/stat`.
fn threads(pid: u32) -> Vec<Thread> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the node's threads");
    tasks
        .filter_map(|task| {
            // A thread that ended meanwhile has no stat to read.
            std::fs::read_to_string(task.expect("a thread").path().join("stat")).ok()
        })
        .map(|stat| Thread::parse(&stat))
        .collect()
}

fn fill_ticks(pid: u32) -> u64 {
    threads(pid)
        .iter()
        .filter(|thread| thread.name == FILL_THREAD)
        .map(|thread| thread.ticks)
        .sum()
}

/// The node's fill threads run at `nice` and serving threads at the process's own; a
/// cold read of 64 MiB spends CPU on the fill threads and is exact, and reading it again
/// from memory spends at most a quarter of that there.
async fn fills_run_apart(rig: &Rig, nice: i64) {
    let pid = rig.portico().pid().expect("pid");
    let main = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the node's stat");
    let base = Thread::parse(&main).nice;
    let all = threads(pid);
    let fill: Vec<&Thread> = all.iter().filter(|t| t.name == FILL_THREAD).collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(fill.len(), cores, "one fill thread per core: {all:?}");
    for thread in &fill {
        assert_eq!(thread.nice, nice.max(base), "{thread:?}");
    }
    for thread in all.iter().filter(|t| t.name != FILL_THREAD) {
        assert_eq!(
            thread.nice, base,
            "serving threads keep the process's: {thread:?}"
        );
    }

    let data = random_bytes(64 * MIB, 91);
    rig.put("cold.bin", &data).await;
    let before = fill_ticks(pid);
    assert!(rig.get("cold.bin", None).await == data, "the cold read");
    let filled = fill_ticks(pid) - before;
    assert!(filled > 0, "the fills ran on the fill threads");

    let before = fill_ticks(pid);
    assert!(rig.get("cold.bin", None).await == data, "the hits");
    let hits = fill_ticks(pid) - before;
    assert!(
        hits * 4 <= filled,
        "hits leave the fill threads idle: {hits} ticks against {filled} for the fills"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fills_run_on_threads_of_their_own_at_a_lower_priority() {
    let rig = Rig::start("fill-threads", |settings| {
        settings.tables = "[prefetch]\nenabled = false\n".to_owned();
    })
    .await;
    fills_run_apart(&rig, 10).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_fill_nice_0_fills_run_apart_at_the_serving_priority() {
    let rig = Rig::start("fill-threads-0", |settings| {
        settings.tables = "[prefetch]\nenabled = false\n".to_owned();
        settings.upstream_extra = "fill_nice = 0\n".to_owned();
    })
    .await;
    fills_run_apart(&rig, 0).await;
}
