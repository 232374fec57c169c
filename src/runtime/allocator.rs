//! The allocator's settings for the long-running roles.
//!
//! glibc's malloc gives each thread that allocates an arena of its own (up to eight per core)
//! and keeps what is freed in that arena for later; it also raises its threshold for handing
//! large blocks straight to the kernel each time one is freed. A controller's Tokio workers and
//! blocking threads take turns at the same bursts (a page of a listing, a rendered manifest,
//! Helm's output), so by default it holds several arenas' worth of its largest burst long
//! after. Two arenas, blocks of 64 KiB or more mapped and unmapped on their own, and the free
//! pages inside the arenas handed back every few seconds ([`spawn_trimming`]) keep the resident
//! set near what is live, for a few more system calls.

/// Blocks at least this large are mapped on their own and returned to the kernel when freed.
const MMAP_THRESHOLD: i32 = 64 * 1024;
/// Free memory at the top of an arena beyond this goes back to the kernel.
const TRIM_THRESHOLD: i32 = 128 * 1024;
/// Arenas shared by all threads.
const ARENAS: i32 = 2;
/// How often free pages inside the arenas go back to the kernel.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Applies the settings above; call it first, before other threads start allocating (an arena
/// made before stays).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before other threads
    // allocate, and an unknown parameter is refused, not undefined.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Hands the free pages inside the arenas back to the kernel every [`TRIM_EVERY`], for as long
/// as the process runs (it must be called within a Tokio runtime). The top of an arena is
/// trimmed as it frees, but a page freed below a live block stays resident until then.
pub fn spawn_trimming() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // SAFETY: malloc_trim only returns free memory; it is safe at any time.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    });
}
