//! The CPU time of one child process over time: a thread finds this process's child of a given
//! name and reads the CPU time of all its threads every millisecond, so that the CPU a process
//! spent between two instants (two requests it made) can be read afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the child's CPU time is read.
const PERIOD: Duration = Duration::from_millis(1);

/// Samples the CPU time of this process's child `name` until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Samples>,
}

/// The child's CPU time (nanoseconds, all threads) at instants, oldest first.
pub struct Samples(Vec<(Instant, u64)>);

impl Sampler {
    /// Starts looking for a child process (of this process) whose command is `name`.
    pub fn start(name: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || sample(name, &stopped));
        Sampler { stop, thread }
    }

    /// Stops sampling; what was sampled.
    pub fn finish(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(Samples(Vec::new()))
    }
}

impl Samples {
    /// The child's CPU time (ms) at `instant`: the last sample taken at or before it.
    pub fn at(&self, instant: Instant) -> f64 {
        let index = self.0.partition_point(|(taken, _)| *taken <= instant);
        match index {
            0 => 0.0,
            i => self.0[i - 1].1 as f64 / 1e6,
        }
    }

    /// When the child was last seen running.
    pub fn last_seen(&self) -> Option<Instant> {
        self.0.last().map(|(taken, _)| *taken)
    }

    /// The child's CPU time (ms) when it was last seen.
    pub fn last(&self) -> f64 {
        self.0.last().map_or(0.0, |(_, ns)| *ns as f64 / 1e6)
    }
}

fn sample(name: &str, stop: &AtomicBool) -> Samples {
    let mut samples = Vec::new();
    let mut child = None;
    while !stop.load(Ordering::Relaxed) {
        if child.is_none() {
            child = find_child(name);
            if child.is_some() {
                // The child existed, with no CPU of its own yet, a moment before it was found.
                samples.push((Instant::now(), 0));
            }
        }
        if let Some(pid) = child {
            // Threads of an exiting process leave one by one: the sum is kept from going down.
            let before = samples.last().map_or(0, |(_, ns)| *ns);
            match cpu_nanoseconds(pid) {
                Some(ns) => samples.push((Instant::now(), ns.max(before))),
                None => break,
            }
        }
        std::thread::sleep(PERIOD);
    }
    Samples(samples)
}

/// This process's child named `name`, if there is one.
fn find_child(name: &str) -> Option<u32> {
    let parent = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let command = head.split_once('(')?.1;
            // The fields after the command: state, then the parent's pid.
            let ppid = rest.split_whitespace().nth(1)?;
            (command == name && ppid == parent).then_some(pid)
        })
}

/// The CPU time of every thread of `pid` so far (`/proc/PID/task/*/schedstat`, nanoseconds);
/// `None` once the process is gone.
fn cpu_nanoseconds(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += schedstat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    // A zombie has no threads left to read.
    (total > 0).then_some(total)
}
