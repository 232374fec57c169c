//! What a process uses, read from `/proc`: its CPU time, so that a call to a resident engine can
//! be bounded by the CPU time it takes as a `helm` process is by `RLIMIT_CPU`, and its data
//! size, which an engine's `RLIMIT_DATA` bounds.

use std::time::Duration;

/// How often a call's CPU time is looked at.
const CPU_CHECK: Duration = Duration::from_millis(100);

/// Returns once process `pid` has spent `limit` of CPU time more than when this was called
/// (never, when its time cannot be read).
pub(super) async fn cpu_spent(pid: Option<u32>, limit: Duration) {
    let start = pid.and_then(cpu_time);
    let (Some(pid), Some(start)) = (pid, start) else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(CPU_CHECK).await;
        if cpu_time(pid).is_some_and(|now| now.saturating_sub(start) >= limit) {
            return;
        }
    }
}

/// The size of process `pid`'s data (`VmData` of `/proc/<pid>/status`: its private writable
/// mappings, which `RLIMIT_DATA` counts), in bytes.
pub(super) fn data_size(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("VmData:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    Some(kib << 10)
}

/// The CPU time process `pid` has spent, user and system, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces; `utime` and `stime` are the 12th and
    // 13th fields after it.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let mut ticks = || fields.next()?.parse::<u64>().ok();
    let ticks = ticks()? + ticks()?;
    // SAFETY: sysconf only reads a constant of the system.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(Duration::from_millis(ticks * 1000 / per_second.max(1)))
}
