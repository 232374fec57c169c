//! What one Helm call may take, in memory and CPU time, in a `helm` process of its own or in a
//! resident engine; and how many engines serve calls, and for how long one waits for the next.

use std::time::Duration;

/// The address space a `helm` process may take. Go reserves about 600 MiB of it at start, so
/// this leaves Helm some 400 MiB of heap: several times what the largest charts tried need
/// (cert-manager's render peaks under 60 MiB), while a render that values blow up (a 150 MB
/// document) stops at a few hundred MiB instead of taking the controller's memory with it.
pub(super) const ADDRESS_SPACE_LIMIT: u64 = 1 << 30;
/// Where Go's collector starts working hard, well below [`ADDRESS_SPACE_LIMIT`].
pub(super) const GO_MEMORY_LIMIT: &str = "384MiB";
/// How much a `helm` process's heap grows between collections (Go's default is 100). A call
/// lives a fraction of a second, so most collections are wasted work: at 400, fireworks-app's
/// install takes 5–15% less CPU for 2 MiB more at its peak, and cert-manager's render 17% less
/// for 89 MiB at its peak instead of 68 (measured with Helm 4.3.1).
pub(super) const GO_GC_PERCENT: &str = "400";
/// Go's settings for a Helm process, which it reads as it starts.
pub(super) const GO_RUNTIME: [(&str, &str); 2] =
    [("GOMEMLIMIT", GO_MEMORY_LIMIT), ("GOGC", GO_GC_PERCENT)];
/// The live heap one call in a resident engine may hold, as Go's collector measures it (the
/// engine ends as if out of memory past it, see `helm-engine/memory.go`). The largest published
/// charts tried hold under 50 MiB at their peak (kyverno 3.9.0, whose render is 5.6 MiB of
/// YAML); a render that values blow up stops its engine instead, so that [`ENGINES`] engines and
/// the controller stay within the pod's 512 MiB.
pub(super) const ENGINE_CALL_HEAP: u64 = 160 << 20;
/// The memory a resident engine may write at all (`RLIMIT_DATA`: heap, stacks and what Go
/// keeps of its largest heap), a backstop well above [`ENGINE_CALL_HEAP`]: the address space Go
/// keeps grows with the largest renders an engine served, so it is no measure of one call.
pub(super) const ENGINE_DATA_LIMIT: u64 = 320 << 20;
/// The data size past which a resident engine stops after its call, so that the next call
/// starts with a fresh one well within [`ENGINE_DATA_LIMIT`]. A fresh engine's data is some
/// 35 MiB; after a render of kyverno, some 270 MiB with a resident size of 180.
pub(super) const ENGINE_RECYCLE_DATA: u64 = 256 << 20;
/// The live heap an engine may keep between calls before it stops: Helm keeps some of every
/// call (some 6 MiB of each render of kyverno), which would count against later calls. A fresh
/// engine keeps some 14 MiB after a render of kyverno; the engine measures it only after a call
/// whose heap passed 64 MiB, since measuring costs a full collection.
pub(super) const ENGINE_RETAINED_HEAP: u64 = 48 << 20;
/// Go's settings for the resident engine: its collector works hard well below
/// [`ENGINE_CALL_HEAP`], so that garbage does not count against a call.
pub(super) const ENGINE_GO_RUNTIME: [(&str, &str); 2] =
    [("GOMEMLIMIT", "128MiB"), ("GOGC", GO_GC_PERCENT)];
/// The CPU time one Helm call may take. An install of cert-manager, the largest chart tried,
/// takes well under a second of it in an engine; a template that loops is stopped here, so that
/// one composition's templates hold an engine, and the compositions waiting for one, for no
/// longer than this (a `helm` process is stopped by the same limit, `RLIMIT_CPU`).
pub(super) const CALL_CPU_LIMIT: Duration = Duration::from_secs(5);
/// How long a resident engine waits for a call before it stops.
pub(super) const ENGINE_IDLE: Duration = Duration::from_secs(20);
/// Resident engines that serve calls at once. A call is mostly requests to the API server, so a
/// second engine overlaps one call's waits with another's work; each engine takes about
/// 100 MiB while it runs.
pub(super) const ENGINES: usize = 2;
