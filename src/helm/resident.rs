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
//!
//! A call is bounded by what it uses, not by what its engine used before it. The engine ends a
//! call whose live heap passes [`Limits::heap`] (`helm-engine/memory.go`); its data limit is a
//! backstop. Go never gives its heap's address space back, and Helm keeps a little of every
//! call, so an engine whose data or retained heap has grown past [`Limits`] after a call stops
//! (the next call starts a fresh one), and a call whose engine dies after serving others is run
//! once more in a fresh engine before its death is told. Engines are shared out among the release
//! namespaces in turn ([`FairGate`]), so one namespace's renders, however many, delay
//! another's by at most one call's CPU time per engine.
//!
//! An engine's death is told by how it exited — Go's runtime ends a process with status 2 on a
//! fatal error, the kernel's out-of-memory killer with `SIGKILL` — and named by the first line
//! of Go's report; the rest of the report, registers and goroutines, goes to the log only.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::exit::Exit;
use super::limits::ENGINE_GO_RUNTIME;
use super::process::{Limit, limit};
use super::usage::{cpu_spent, data_size};
use super::{Error, Output};
use crate::runtime::FairGate;

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

/// What a call, and an engine, may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// The CPU time one call may take.
    pub cpu: Duration,
    /// The live heap one call may hold (the engine measures it).
    pub heap: u64,
    /// The data an engine may write at all (`RLIMIT_DATA`).
    pub data: u64,
    /// The data size past which an engine stops after its call.
    pub recycle_at: u64,
    /// The live heap an engine may keep between calls: Helm keeps a little of every call.
    pub retained: u64,
}

/// Engines, each started when needed.
pub(super) struct Resident {
    binary: PathBuf,
    idle: Duration,
    limits: Limits,
    /// A permit per engine: calls wait here for a free one, release namespaces in turn.
    free: FairGate,
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
    /// Calls it has answered.
    served: u32,
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
    /// The live heap the engine still holds after a call that grew it (0: not measured).
    #[serde(default)]
    retained: u64,
}

impl Resident {
    /// At most `engines` engines run from `binary`, each stopped after `idle` without a call,
    /// as soon as a call passes one of its `limits`, or after a call that left its data larger
    /// than they allow.
    pub(super) fn new(
        binary: PathBuf,
        engines: usize,
        idle: Duration,
        limits: Limits,
    ) -> Arc<Self> {
        Arc::new(Resident {
            binary,
            idle,
            limits,
            free: FairGate::new(engines),
            slots: (0..engines).map(|_| Default::default()).collect(),
        })
    }

    /// Runs one helm command line with exactly `env`, within `timeout` (waiting for the calls
    /// before it included), as one of the calls for release namespace `share`.
    pub(super) async fn run(
        self: &Arc<Self>,
        verb: &'static str,
        args: &[OsString],
        env: &[(&'static str, OsString)],
        share: &str,
        timeout: Duration,
    ) -> Result<Output, Error> {
        let request = request_line(verb, args, env)?;
        tokio::time::timeout(timeout, self.exchange(verb, &request, share))
            .await
            .map_err(|_| Error::Timeout { verb, timeout })?
    }

    /// Sends the request to a free engine; if that engine dies after serving other calls, once
    /// more to a fresh one, so that what decides is what this call needs.
    async fn exchange(
        self: &Arc<Self>,
        verb: &'static str,
        request: &[u8],
        share: &str,
    ) -> Result<Output, Error> {
        let _permit = self.free.enter(share).await;
        let (index, slot) = self.free_slot().await;
        let mut slot = Held(slot);
        loop {
            match self.exchange_once(index, &mut slot, verb, request).await {
                Err(Death { served, error }) if served > 0 => {
                    tracing::info!(%error, served, "the Helm engine ended after serving other calls; the call runs again in a fresh one");
                }
                outcome => return outcome.map_err(|death| death.error),
            }
        }
    }

    async fn exchange_once(
        self: &Arc<Self>,
        index: usize,
        slot: &mut Held<'_>,
        verb: &'static str,
        request: &[u8],
    ) -> Result<Output, Death> {
        if slot.engine.is_none() {
            let started = self
                .start(verb)
                .map_err(|error| Death { served: 0, error })?;
            slot.engine = Some(started);
            slot.generation += 1;
            tokio::spawn(stop_when_idle(Arc::downgrade(self), index, slot.generation));
        }
        let engine = slot.engine.as_mut().expect("started above");
        engine.mid_call = true;
        let pid = engine.child.id();
        let reply = tokio::select! {
            reply = engine.call(request) => reply,
            () = cpu_spent(pid, self.limits.cpu) => {
                // Left mid-call, the engine is stopped as the slot is let go.
                let seconds = self.limits.cpu.as_secs_f64();
                return Err(Death { served: 0, error: Error::OutOfCpu { verb, seconds } });
            }
        };
        match reply {
            Ok(reply) => {
                engine.mid_call = false;
                engine.last_call = Instant::now();
                engine.served += 1;
                let data = pid.and_then(data_size).unwrap_or(0);
                if data > self.limits.recycle_at || reply.retained > self.limits.retained {
                    let (data_mib, retained_mib) = (data >> 20, reply.retained >> 20);
                    tracing::debug!(data_mib, retained_mib, "the Helm engine stops, grown");
                    slot.engine = None;
                }
                Ok(Output {
                    success: reply.code == 0,
                    stdout: reply.stdout,
                    stderr: reply.stderr,
                })
            }
            Err(failure) => {
                let engine = slot.engine.take().expect("called above");
                let served = engine.served;
                let error = engine.ended(verb, failure, &self.limits).await;
                Err(Death { served, error })
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
            .env("HELM_ENGINE_CALL_HEAP", self.limits.heap.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        limit(&mut command, Limit::Data, self.limits.data);
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
            served: 0,
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

    /// Why the engine failed a call, once it has ended (it is killed if it has not within a
    /// second): told by how it exited, and named by the first line of what it reported.
    async fn ended(mut self, verb: &'static str, failure: String, limits: &Limits) -> Error {
        let status = match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                None
            }
        };
        // Its standard error closes as it exits.
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_task).await;
        let report = lock(&self.stderr).text();
        let death = Exit::of(status, &report);
        tracing::warn!(verb, %failure, exit = %death, report, "the Helm engine ended during a call");
        match death {
            Exit::OutOfMemory => Error::OutOfMemory {
                verb,
                limit_mib: limits.heap >> 20,
            },
            Exit::Crashed(how) => Error::Crashed { verb, how },
        }
    }
}

/// A call's engine ended: how, and how many calls it had answered before.
struct Death {
    served: u32,
    error: Error,
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
#[path = "resident_tests.rs"]
mod tests;
