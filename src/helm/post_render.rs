//! Helm's post-render step as a gate: the manifest Helm is about to write goes to the caller
//! for a verdict first, inside the same `helm upgrade --install`.
//!
//! A check of what a release writes needs the manifest Helm renders. Rendering it in a
//! `helm template` of its own costs a second Helm process per release, and checks a rendering
//! that is not necessarily the one Helm then writes. Helm hands every rendered manifest
//! (templates and hooks) to a post-renderer before it writes anything, and stops when the
//! post-renderer fails: the gate is that post-renderer. [`Gate::start`] listens on a Unix socket
//! in a private directory; each Helm write takes a [`Ticket`], whose [`PostRenderer`] makes Helm
//! run `compositor post-render SOCKET TICKET`, a relay ([`relay`]) that sends the manifest to
//! the socket and passes it on unchanged if the ticket's holder allows it ([`Request::answer`]).
//!
//! Helm installs a chart's `crds/` before it renders, without the post-renderer: those are for
//! the caller to check before the call.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

/// The subcommand of the `compositor` binary that relays a manifest to the gate.
pub const SUBCOMMAND: &str = "post-render";
/// The name of the Helm 4 plugin that runs the relay.
pub(super) const PLUGIN: &str = "compositor-gate";

const ALLOW: &str = "allow";
const DENY: &str = "deny";

/// The largest manifest the gate reads. Helm keeps each revision's manifest, compressed, in one
/// Secret of at most 1 MiB, so a larger manifest could not be recorded anyway; the cap keeps a
/// render that values blow up out of the controller's memory.
pub const MAX_MANIFEST: u64 = 16 << 20;

/// A manifest over [`MAX_MANIFEST`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the rendered manifest is over {} MiB, more than a release can hold", MAX_MANIFEST >> 20)]
pub struct ManifestTooLarge;

/// The tickets waiting for their manifest, by number.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Request>>>>;

/// The listening end: hands each manifest Helm sends to the ticket it was sent for.
pub struct Gate {
    socket: PathBuf,
    relay: PathBuf,
    waiting: Waiting,
    next: AtomicU64,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// What Helm runs as its post-renderer: a command and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostRenderer {
    /// The executable.
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// One Helm write's place at the gate; dropping it turns away a manifest sent for it.
pub struct Ticket {
    number: u64,
    renderer: PostRenderer,
    receiver: oneshot::Receiver<Request>,
    waiting: Waiting,
}

/// A manifest Helm is about to write, waiting for its verdict.
pub struct Request {
    /// The rendered manifest, templates and hooks, unless it is too large to read.
    pub manifest: Result<String, ManifestTooLarge>,
    verdict: oneshot::Sender<bool>,
}

impl Gate {
    /// Listens in a new private directory (it must be called within a Tokio runtime). `relay` is
    /// the `compositor` binary Helm runs as the post-renderer.
    pub fn start(relay: PathBuf) -> std::io::Result<Gate> {
        let dir = tempfile::Builder::new()
            .prefix("compositor-gate-")
            .tempdir()?;
        let socket = dir.path().join("socket");
        let listener = UnixListener::bind(&socket)?;
        let waiting = Waiting::default();
        let task = tokio::spawn(accept(listener, waiting.clone()));
        Ok(Gate {
            socket,
            relay,
            waiting,
            next: AtomicU64::new(1),
            task,
            _dir: dir,
        })
    }

    /// A place for one Helm write.
    pub fn ticket(&self) -> Ticket {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        lock(&self.waiting).insert(number, sender);
        let renderer = PostRenderer {
            command: self.relay.clone(),
            args: vec![
                SUBCOMMAND.to_string(),
                self.socket.display().to_string(),
                number.to_string(),
            ],
        };
        Ticket {
            number,
            renderer,
            receiver,
            waiting: self.waiting.clone(),
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ticket {
    /// The post-renderer to give Helm for this write.
    pub fn renderer(&self) -> &PostRenderer {
        &self.renderer
    }

    /// The manifest, once Helm has rendered it; `None` if the gate stopped.
    pub async fn request(&mut self) -> Option<Request> {
        (&mut self.receiver).await.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.waiting).remove(&self.number);
    }
}

impl Request {
    /// Lets Helm write the manifest (`true`) or stops it (`false`).
    pub fn answer(self, allow: bool) {
        let _ = self.verdict.send(allow);
    }
}

fn lock(waiting: &Waiting) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Request>>> {
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn accept(listener: UnixListener, waiting: Waiting) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, waiting.clone()));
            }
            Err(error) => tracing::warn!(%error, "the post-render gate cannot accept"),
        }
    }
}

/// One relay: its ticket number on the first line, then the manifest; answered with
/// [`ALLOW`] or [`DENY`].
async fn serve(stream: tokio::net::UnixStream, waiting: Waiting) {
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut line = String::new();
    let mut manifest = String::new();
    let read = async {
        reader.read_line(&mut line).await?;
        let mut body = (&mut reader).take(MAX_MANIFEST + 1);
        body.read_to_string(&mut manifest).await
    };
    let verdict = match read.await {
        Ok(read) => {
            let manifest = match read as u64 > MAX_MANIFEST {
                true => Err(ManifestTooLarge),
                false => Ok(manifest),
            };
            verdict(&waiting, line.trim(), manifest).await
        }
        Err(error) => {
            tracing::debug!(%error, "a post-render relay failed");
            false
        }
    };
    let answer = if verdict { ALLOW } else { DENY };
    let _ = writer.write_all(answer.as_bytes()).await;
}

/// The holder's verdict on `manifest`; a ticket nobody holds is turned away.
async fn verdict(
    waiting: &Waiting,
    number: &str,
    manifest: Result<String, ManifestTooLarge>,
) -> bool {
    let holder = number.parse().ok().and_then(|n| lock(waiting).remove(&n));
    let Some(holder) = holder else {
        return false;
    };
    let (sender, receiver) = oneshot::channel();
    let request = Request {
        manifest,
        verdict: sender,
    };
    holder.send(request).is_ok() && receiver.await.unwrap_or(false)
}

/// The relay's part, run by Helm: sends `manifest` for ticket `number` to the gate at
/// `socket`; the manifest to write if the gate allows it, else `None`.
pub fn relay(socket: &Path, number: &str, manifest: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(number.as_bytes())?;
    stream.write_all(b"\n")?;
    stream.write_all(manifest)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok((answer == ALLOW).then(|| manifest.to_vec()))
}

/// The plugin manifest (`plugin.yaml`) of the Helm 4 plugin that runs `renderer`'s command; its
/// arguments are given with `--post-renderer-args`. JSON is YAML, so the path needs no quoting
/// by hand.
pub(super) fn plugin_manifest(renderer: &PostRenderer) -> String {
    let command = serde_json::Value::from(renderer.command.display().to_string());
    format!(
        "apiVersion: v1\ntype: postrenderer/v1\nname: {PLUGIN}\nversion: 0.1.0\n\
         runtime: subprocess\nruntimeConfig:\n  platformCommand:\n  - command: {command}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        Gate::start(PathBuf::from("/bin/compositor")).unwrap()
    }

    /// The relay's answer for `ticket`, as Helm's post-renderer would get it.
    fn relayed(
        gate: &Gate,
        ticket: &Ticket,
        manifest: &'static str,
    ) -> impl Future<Output = Option<Vec<u8>>> + use<> {
        let socket = gate.socket.clone();
        let number = ticket.renderer().args[2].clone();
        let relay = move || relay(&socket, &number, manifest.as_bytes()).unwrap();
        async move { tokio::task::spawn_blocking(relay).await.unwrap() }
    }

    #[tokio::test]
    async fn an_allowed_manifest_passes_unchanged() {
        let gate = gate();
        let mut ticket = gate.ticket();
        let relayed = relayed(&gate, &ticket, "kind: A\n---\nkind: B\n");
        let holder = async {
            let request = ticket.request().await.unwrap();
            assert_eq!(request.manifest.as_deref(), Ok("kind: A\n---\nkind: B\n"));
            request.answer(true);
        };
        let (relayed, ()) = tokio::join!(relayed, holder);
        assert_eq!(relayed.as_deref(), Some(&b"kind: A\n---\nkind: B\n"[..]));
    }

    #[tokio::test]
    async fn a_denied_manifest_is_stopped() {
        let gate = gate();
        let mut ticket = gate.ticket();
        let relayed = relayed(&gate, &ticket, "kind: A\n");
        let holder = async { ticket.request().await.unwrap().answer(false) };
        let (relayed, ()) = tokio::join!(relayed, holder);
        assert_eq!(relayed, None);
    }

    #[tokio::test]
    async fn a_ticket_nobody_holds_is_turned_away() {
        let gate = gate();
        let ticket = gate.ticket();
        let number = ticket.renderer().args[2].clone();
        drop(ticket);
        assert!(
            lock(&gate.waiting).is_empty(),
            "a dropped ticket waits no more"
        );
        let socket = gate.socket.clone();
        let unknown = tokio::task::spawn_blocking(move || {
            (
                relay(&socket, &number, b"kind: A\n").unwrap(),
                relay(&socket, "not a number", b"kind: A\n").unwrap(),
            )
        });
        assert_eq!(unknown.await.unwrap(), (None, None));
    }

    #[tokio::test]
    async fn a_request_dropped_without_an_answer_is_a_denial() {
        let gate = gate();
        let mut ticket = gate.ticket();
        let relayed = relayed(&gate, &ticket, "kind: A\n");
        let holder = async { drop(ticket.request().await.unwrap()) };
        let (relayed, ()) = tokio::join!(relayed, holder);
        assert_eq!(relayed, None);
    }

    #[test]
    fn the_plugin_runs_the_relay_whatever_its_path() {
        let renderer = PostRenderer {
            command: PathBuf::from("/opt/my tools/compositor"),
            args: vec![],
        };
        let manifest = plugin_manifest(&renderer);
        assert!(manifest.contains("type: postrenderer/v1\n"), "{manifest}");
        assert!(
            manifest.contains(&format!("name: {PLUGIN}\n")),
            "{manifest}"
        );
        assert!(
            manifest.contains(r#"- command: "/opt/my tools/compositor""#),
            "{manifest}"
        );
    }
}
