//! Helm calls served by a resident engine: `helm-engine`, a small Go program that links Helm's
//! own command line and runs one call after another, each exactly as a `helm` process with the
//! same arguments and environment would (see `helm-engine/main.go`). A few engines serve calls
//! at once, each call on the first one free.
//!
//! A `helm` process spends more of a short call starting than working: loading a 60 MB binary,
//! registering client-go's types, building a client and its TLS connection. The engine pays that
//! once and keeps its connections, so an install costs Helm's own work. An engine is started
//! when a call finds none free and stopped after [`Resident`]'s idle time without one, so an
//! idle controller runs no engine and holds none of its memory. A call that times out, or whose
//! caller gives up, stops its engine at once, as a `helm` process would be killed; the next call
//! starts a new one. So does a call that spends more than its CPU time: a template that loops
//! would otherwise hold an engine, and every composition waiting for one, until the timeout.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::error::{ran_out_of_memory, shorten};
use super::process::{Limit, limit};
use super::usage::cpu_spent;
use super::{ENGINE_DATA_LIMIT, ENGINE_GO_RUNTIME, Error, Output};

/// Lines of the engine's own standard error kept to explain its end.
const STDERR_LINES: usize = 20;

/// What the engine printed by itself, kept to explain its end: its last lines, or, once Go's
/// runtime reports a crash (`fatal error: …`, `panic: …`, then a dump of every goroutine), the
/// first lines of that report.
#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
    crashed: bool,
}

impl Tail {
    fn push(&mut self, line: String) {
        if !self.crashed && (line.starts_with("fatal error:") || line.starts_with("panic:")) {
            self.crashed = true;
            self.lines.clear();
        }
        if self.lines.len() == STDERR_LINES {
            if self.crashed {
                return;
            }
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    fn text(&self) -> String {
        Vec::from(self.lines.clone()).join("\n")
    }
}

/// Engines, each started when needed.
pub(super) struct Resident {
    binary: PathBuf,
    idle: Duration,
    /// The CPU time one call may take.
    cpu_limit: Duration,
    /// A permit per engine: calls wait here for a free one.
    free: tokio::sync::Semaphore,
    slots: Vec<tokio::sync::Mutex<Slot>>,
}

/// The running engine, if any; `generation` tells a stopped one from its successor.
#[derive(Default)]
struct Slot {
    engine: Option<Running>,
    generation: u64,
}

struct Running {
    child: Child,
    requests: ChildStdin,
    replies: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<Tail>>,
    stderr_task: tokio::task::JoinHandle<()>,
    /// A request was sent and its reply not read: the call was cut short.
    mid_call: bool,
    last_call: Instant,
}

#[derive(serde::Serialize)]
struct Request<'a> {
    args: Vec<&'a str>,
    env: std::collections::BTreeMap<&'a str, &'a str>,
}

#[derive(serde::Deserialize)]
struct Reply {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Resident {
    /// At most `engines` engines run from `binary`, each stopped after `idle` without a call,
    /// or as soon as a call has taken `cpu_limit` of its CPU time.
    pub(super) fn new(
        binary: PathBuf,
        engines: usize,
        idle: Duration,
        cpu_limit: Duration,
    ) -> Arc<Self> {
        Arc::new(Resident {
            binary,
            idle,
            cpu_limit,
            free: tokio::sync::Semaphore::new(engines),
            slots: (0..engines).map(|_| Default::default()).collect(),
        })
    }

    /// Runs one helm command line with exactly `env`, within `timeout` (waiting for the calls
    /// before it included).
    pub(super) async fn run(
        self: &Arc<Self>,
        verb: &'static str,
        args: &[OsString],
        env: &[(&'static str, OsString)],
        timeout: Duration,
    ) -> Result<Output, Error> {
        let request = request_line(verb, args, env)?;
        tokio::time::timeout(timeout, self.exchange(verb, &request))
            .await
            .map_err(|_| Error::Timeout { verb, timeout })?
    }

    async fn exchange(
        self: &Arc<Self>,
        verb: &'static str,
        request: &[u8],
    ) -> Result<Output, Error> {
        let _permit = self
            .free
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let (index, slot) = self.free_slot().await;
        let mut slot = Held(slot);
        if slot.engine.is_none() {
            slot.engine = Some(self.start(verb)?);
            slot.generation += 1;
            tokio::spawn(stop_when_idle(Arc::downgrade(self), index, slot.generation));
        }
        let engine = slot.engine.as_mut().expect("started above");
        engine.mid_call = true;
        let pid = engine.child.id();
        let reply = tokio::select! {
            reply = engine.call(request) => reply,
            () = cpu_spent(pid, self.cpu_limit) => {
                // Left mid-call, the engine is stopped as the slot is let go.
                let seconds = self.cpu_limit.as_secs_f64();
                return Err(Error::OutOfCpu { verb, seconds });
            }
        };
        match reply {
            Ok(reply) => {
                engine.mid_call = false;
                engine.last_call = Instant::now();
                Ok(Output {
                    success: reply.code == 0,
                    stdout: reply.stdout,
                    stderr: reply.stderr,
                })
            }
            Err(failure) => {
                let engine = slot.engine.take().expect("called above");
                Err(engine.ended(verb, failure).await)
            }
        }
    }

    /// The first free slot, so that when calls are few the later engines stop. A permit holder
    /// always finds one, but for a moment while an idle check holds it.
    async fn free_slot(&self) -> (usize, tokio::sync::MutexGuard<'_, Slot>) {
        loop {
            let free = self.slots.iter().enumerate().find_map(|(index, slot)| {
                let slot = slot.try_lock().ok()?;
                Some((index, slot))
            });
            if let Some(found) = free {
                return found;
            }
            tokio::task::yield_now().await;
        }
    }

    fn start(&self, verb: &'static str) -> Result<Running, Error> {
        let mut command = Command::new(&self.binary);
        command
            .env_clear()
            .envs(ENGINE_GO_RUNTIME)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        limit(&mut command, Limit::Data, ENGINE_DATA_LIMIT);
        let mut child = command
            .spawn()
            .map_err(|source| Error::Spawn { verb, source })?;
        let (Some(requests), Some(replies), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three are piped");
        };
        let tail = Arc::new(Mutex::new(Tail::default()));
        Ok(Running {
            child,
            requests,
            replies: BufReader::new(replies).lines(),
            stderr_task: tokio::spawn(keep_stderr(stderr, tail.clone())),
            stderr: tail,
            mid_call: false,
            last_call: Instant::now(),
        })
    }
}

/// A slot held for one call. A call cut short (timed out, or its caller gone) leaves its engine
/// mid-call: it is stopped when the slot is let go, as a `helm` process would be killed.
struct Held<'a>(tokio::sync::MutexGuard<'a, Slot>);

impl std::ops::Deref for Held<'_> {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.0
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Slot {
        &mut self.0
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.0.engine.as_ref().is_some_and(|engine| engine.mid_call) {
            self.0.engine = None;
        }
    }
}

impl Running {
    /// Sends one request and reads its reply; an error means the engine is gone or broken.
    async fn call(&mut self, request: &[u8]) -> Result<Reply, String> {
        self.requests
            .write_all(request)
            .await
            .map_err(|error| format!("cannot send it the call: {error}"))?;
        match self.replies.next_line().await {
            Ok(Some(line)) => serde_json::from_str(&line)
                .map_err(|error| format!("it answered something other than a reply: {error}")),
            Ok(None) => Err("it exited during the call".to_string()),
            Err(error) => Err(format!("cannot read its reply: {error}")),
        }
    }

    /// Why the engine failed a call, once it has ended (it is killed if it has not).
    async fn ended(mut self, verb: &'static str, failure: String) -> Error {
        let _ = self.child.start_kill();
        let status = self.child.wait().await;
        // Its standard error closes as it exits.
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_task).await;
        let stderr = lock(&self.stderr).text();
        if ran_out_of_memory(&stderr) {
            let limit_mib = ENGINE_DATA_LIMIT >> 20;
            return Error::OutOfMemory { verb, limit_mib };
        }
        let status = status.map_or_else(|error| error.to_string(), |status| status.to_string());
        Error::Failed {
            verb,
            message: shorten(&format!(
                "the Helm engine failed ({failure}; {status}): {stderr}"
            )),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stderr_task.abort();
    }
}

/// The request for one call, a line of JSON.
fn request_line(
    verb: &'static str,
    args: &[OsString],
    env: &[(&'static str, OsString)],
) -> Result<Vec<u8>, Error> {
    let not_utf8 = || Error::Spawn {
        verb,
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the Helm engine takes UTF-8 arguments and environment only",
        ),
    };
    let request = Request {
        args: args
            .iter()
            .map(|arg| arg.to_str().ok_or_else(not_utf8))
            .collect::<Result<_, _>>()?,
        env: env
            .iter()
            .map(|(name, value)| Ok((*name, value.to_str().ok_or_else(not_utf8)?)))
            .collect::<Result<_, Error>>()?,
    };
    let mut line = serde_json::to_vec(&request).expect("strings serialize");
    line.push(b'\n');
    Ok(line)
}

/// Stops engine `generation` of slot `index` once it has had no call for the idle time.
async fn stop_when_idle(resident: Weak<Resident>, index: usize, generation: u64) {
    let Some(idle) = resident.upgrade().map(|resident| resident.idle) else {
        return;
    };
    let mut wait = idle;
    loop {
        tokio::time::sleep(wait).await;
        let Some(resident) = resident.upgrade() else {
            return;
        };
        // A slot in use is not idle; it is looked at again after another idle time.
        let Ok(mut slot) = resident.slots[index].try_lock() else {
            wait = idle;
            continue;
        };
        let Some(engine) = slot
            .engine
            .as_ref()
            .filter(|_| slot.generation == generation)
        else {
            return;
        };
        let quiet = engine.last_call.elapsed();
        if quiet >= idle {
            tracing::debug!(?quiet, "the Helm engine stops, idle");
            slot.engine = None;
            return;
        }
        wait = idle - quiet;
    }
}

/// Keeps what the engine prints by itself ([`Tail`]), and logs it.
async fn keep_stderr(stderr: ChildStderr, tail: Arc<Mutex<Tail>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(%line, "the Helm engine printed");
        lock(&tail).push(line);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in engine that answers each call with its PID, sleeps on a call naming `hang`,
    /// spins on one naming `spin` and runs out of memory on one naming `die`.
    fn stand_in(dir: &std::path::Path) -> PathBuf {
        let script = dir.join("helm-engine");
        std::fs::write(
            &script,
            "#!/bin/sh\nwhile IFS= read -r line; do\n  case \"$line\" in\n    \
             *'\"hang\"'*) sleep 30 ;;\n    \
             *'\"spin\"'*) while :; do :; done ;;\n    \
             *'\"die\"'*) echo 'fatal error: runtime: cannot allocate memory' >&2; seq 100 >&2; exit 2 ;;\n  esac\n  \
             printf '{\"code\":0,\"stdout\":\"%s\",\"stderr\":\"\"}\\n' $$\ndone\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        script
    }

    /// The CPU time a call of the stand-in may take.
    const CPU: Duration = Duration::from_millis(300);

    /// The PID of the engine that answered `word`, or the call's error.
    async fn call(resident: &Arc<Resident>, word: &str) -> Result<String, Error> {
        let args = [OsString::from(word)];
        let env = [("HOME", OsString::from("/nonexistent"))];
        // A script just written may be busy for a moment when another test forks meanwhile.
        for attempt in 1.. {
            match resident
                .run("test", &args, &env, Duration::from_secs(2))
                .await
            {
                Err(Error::Spawn { .. }) if attempt < 5 => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                outcome => return outcome.map(|output| output.stdout),
            }
        }
        unreachable!()
    }

    #[test]
    fn a_crash_is_told_by_its_first_lines_and_anything_else_by_the_last() {
        let mut tail = Tail::default();
        for n in 0..30 {
            tail.push(format!("warning {n}"));
        }
        assert!(tail.text().starts_with("warning 10\n"), "{}", tail.text());
        tail.push("fatal error: runtime: cannot allocate memory".into());
        for n in 0..30 {
            tail.push(format!("goroutine {n}"));
        }
        let text = tail.text();
        assert!(text.starts_with("fatal error: runtime: cannot allocate memory\ngoroutine 0\n"));
        assert!(
            ran_out_of_memory(&text) && !text.contains("goroutine 19"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn calls_share_one_engine_until_it_is_idle_then_a_new_one_starts() {
        let dir = tempfile::tempdir().unwrap();
        let resident = Resident::new(stand_in(dir.path()), 1, Duration::from_millis(500), CPU);
        let first = call(&resident, "a").await.unwrap();
        assert_eq!(call(&resident, "b").await.unwrap(), first);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            resident.slots[0].lock().await.engine.is_none(),
            "stopped when idle"
        );
        assert_ne!(call(&resident, "c").await.unwrap(), first);
    }

    #[tokio::test]
    async fn a_call_that_times_out_stops_its_engine_at_once_and_the_next_call_starts_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let resident = Resident::new(stand_in(dir.path()), 1, Duration::from_secs(60), CPU);
        let first = call(&resident, "a").await.unwrap();
        let error = call(&resident, "hang").await.unwrap_err();
        assert!(matches!(error, Error::Timeout { .. }), "{error}");
        assert!(
            resident.slots[0].lock().await.engine.is_none(),
            "stopped at once"
        );
        assert_ne!(call(&resident, "b").await.unwrap(), first);
    }

    #[tokio::test]
    async fn an_engine_that_dies_fails_its_call_with_the_reason_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let resident = Resident::new(stand_in(dir.path()), 1, Duration::from_secs(60), CPU);
        let first = call(&resident, "a").await.unwrap();
        let error = call(&resident, "die").await.unwrap_err();
        assert!(matches!(error, Error::OutOfMemory { .. }), "{error}");
        assert_ne!(call(&resident, "b").await.unwrap(), first);
    }

    #[tokio::test]
    async fn a_call_that_spends_its_cpu_time_stops_its_engine_before_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let resident = Resident::new(stand_in(dir.path()), 1, Duration::from_secs(60), CPU);
        let first = call(&resident, "a").await.unwrap();
        // Within the call's timeout of 2 s, which would give a Timeout instead.
        let error = call(&resident, "spin").await.unwrap_err();
        assert!(matches!(error, Error::OutOfCpu { .. }), "{error}");
        assert!(
            resident.slots[0].lock().await.engine.is_none(),
            "stopped at once"
        );
        assert_ne!(call(&resident, "b").await.unwrap(), first);
    }
}
