//! A Helm call as a `helm` process of its own.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::limits::{ADDRESS_SPACE_LIMIT, CALL_CPU_LIMIT};
use super::{Error, Output};

/// Runs `binary` with `args` and exactly `env`, killed after `timeout`.
pub(super) async fn run(
    binary: &Path,
    verb: &'static str,
    args: &[OsString],
    env: &[(&'static str, OsString)],
    timeout: Duration,
) -> Result<Output, Error> {
    let mut command = Command::new(binary);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    limit(&mut command, Limit::AddressSpace, ADDRESS_SPACE_LIMIT);
    limit(&mut command, Limit::CpuSeconds, CALL_CPU_LIMIT.as_secs());
    let child = command
        .spawn()
        .map_err(|source| Error::Spawn { verb, source })?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| Error::Timeout { verb, timeout })?
        .map_err(|source| Error::Spawn { verb, source })?;
    // The kernel stops a process past its hard CPU limit with SIGKILL.
    if std::os::unix::process::ExitStatusExt::signal(&output.status) == Some(libc::SIGKILL) {
        let seconds = CALL_CPU_LIMIT.as_secs_f64();
        return Err(Error::OutOfCpu { verb, seconds });
    }
    Ok(Output {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// What of a child process is limited.
pub(super) enum Limit {
    /// Its address space (`RLIMIT_AS`).
    AddressSpace,
    /// What it writes: heap and stacks (`RLIMIT_DATA`).
    Data,
    /// Its CPU time, in seconds (`RLIMIT_CPU`).
    CpuSeconds,
}

/// Gives the child process at most `amount` (bytes, or seconds) of `what`.
pub(super) fn limit(command: &mut Command, what: Limit, amount: u64) {
    let resource = match what {
        Limit::AddressSpace => libc::RLIMIT_AS,
        Limit::Data => libc::RLIMIT_DATA,
        Limit::CpuSeconds => libc::RLIMIT_CPU,
    };
    let limit = libc::rlimit {
        rlim_cur: amount,
        rlim_max: amount,
    };
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, and reads its own copy of `limit`.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(resource, &limit) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
}

/// `name` in the first folder of `PATH` that has it.
pub(super) fn find_on_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name.as_ref()))
            .find(|p| p.is_file())
    })
}
