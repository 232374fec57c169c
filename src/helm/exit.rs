//! How a resident engine that ended during a call exited, told from its exit status and the
//! kind of its report, never from the report's words: they may quote what the render held.

use std::os::unix::process::ExitStatusExt;

use super::error::ran_out_of_memory;

/// How an engine that ended during a call exited.
#[derive(Debug, PartialEq)]
pub(super) enum Exit {
    /// Go's runtime could not get memory within the engine's data limit (status 2 and its
    /// words), or the kernel killed it (`SIGKILL`, which only the out-of-memory killer sends an
    /// engine that this side did not stop).
    OutOfMemory,
    /// Anything else, described without the report's details.
    Crashed(String),
}

impl Exit {
    /// The exit `status` (none: it did not exit, and was killed), with the engine's `report`.
    pub(super) fn of(status: Option<std::process::ExitStatus>, report: &str) -> Exit {
        let Some(status) = status else {
            return Exit::Crashed("it stopped answering and was killed".into());
        };
        // Only the kind of report is told: its text may quote what the render held.
        let kind = || {
            let line = report
                .lines()
                .find(|line| line.starts_with("fatal error:") || line.starts_with("panic:"))?;
            Some(if line.contains("stack overflow") {
                "its render recursed past Go's stack limit"
            } else if line.starts_with("panic:") {
                "it panicked outside a call"
            } else {
                "Go's runtime stopped it with a fatal error"
            })
        };
        match (status.code(), status.signal()) {
            (Some(2), _) if ran_out_of_memory(report) => Exit::OutOfMemory,
            (_, Some(libc::SIGKILL)) => Exit::OutOfMemory,
            (Some(2), _) => Exit::Crashed(kind().unwrap_or("it exited with status 2").into()),
            (Some(code), _) => Exit::Crashed(format!("it exited with status {code}")),
            (None, Some(signal)) => Exit::Crashed(format!("it was ended by signal {signal}")),
            (None, None) => Exit::Crashed(status.to_string()),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::OutOfMemory => f.write_str("out of memory"),
            Exit::Crashed(how) => f.write_str(how),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_is_classified_by_its_status_then_its_words() {
        use std::process::ExitStatus;
        let code = |code: i32| Some(ExitStatus::from_raw(code << 8));
        let memory = "runtime: out of memory: cannot allocate 4194304-byte block\nfatal error: out of memory\n\ngoroutine 1";
        assert_eq!(Exit::of(code(2), memory), Exit::OutOfMemory);
        let killed = Some(ExitStatus::from_raw(libc::SIGKILL));
        assert_eq!(
            Exit::of(killed, ""),
            Exit::OutOfMemory,
            "the kernel's killer"
        );
        // The words alone do not make it memory: a helm error quoting them exits 1.
        assert_eq!(
            Exit::of(code(1), memory),
            Exit::Crashed("it exited with status 1".into())
        );
        let overflow = "runtime: goroutine stack exceeds 1000000000-byte limit\nfatal error: stack overflow\n\nrax 0x0";
        assert_eq!(
            Exit::of(code(2), overflow),
            Exit::Crashed("its render recursed past Go's stack limit".into())
        );
        assert_eq!(
            Exit::of(None, ""),
            Exit::Crashed("it stopped answering and was killed".into())
        );
    }
}
