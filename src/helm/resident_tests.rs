//! The resident engines against a stand-in engine script.

use super::*;
use crate::helm::error::ran_out_of_memory;

/// A stand-in engine that answers each call with its PID, sleeps on a call naming `hang`,
/// spins on one naming `spin`, runs out of memory on one naming `die` (on one naming
/// `fragile`, only once it has served a call) and crashes with a register dump on `crash`.
fn stand_in(dir: &std::path::Path) -> PathBuf {
    let script = dir.join("helm-engine");
    std::fs::write(
        &script,
        "#!/bin/sh\nserved=0\nwhile IFS= read -r line; do\n  case \"$line\" in\n    \
         *'\"hang\"'*) sleep 30 ;;\n    \
         *'\"spin\"'*) while :; do :; done ;;\n    \
         *'\"die\"'*) echo 'fatal error: runtime: cannot allocate memory' >&2; seq 100 >&2; exit 2 ;;\n    \
         *'\"fragile\"'*) [ $served -eq 0 ] || { echo 'fatal error: out of memory' >&2; exit 2; } ;;\n    \
         *'\"crash\"'*) echo 'fatal error: unexpected signal during runtime execution' >&2; echo 'rip 0x4a3b2c secret-value' >&2; exit 2 ;;\n  esac\n  \
         served=$((served + 1))\n  \
         printf '{\"code\":0,\"stdout\":\"%s\",\"stderr\":\"\"}\\n' $$\ndone\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// What a call of the stand-in may take: its engines are recycled after no call.
const LIMITS: Limits = Limits {
    cpu: Duration::from_millis(300),
    heap: 64 << 20,
    data: 1 << 30,
    recycle_at: u64::MAX,
    retained: u64::MAX,
};

/// Engines of the stand-in.
fn resident(dir: &std::path::Path, idle: Duration) -> Arc<Resident> {
    Resident::new(stand_in(dir), 1, idle, LIMITS)
}

/// The PID of the engine that answered `word`, or the call's error.
async fn call(resident: &Arc<Resident>, word: &str) -> Result<String, Error> {
    call_for(resident, "team", word).await
}

/// The same, as a call for release namespace `share`.
async fn call_for(resident: &Arc<Resident>, share: &str, word: &str) -> Result<String, Error> {
    let args = [OsString::from(word)];
    let env = [("HOME", OsString::from("/nonexistent"))];
    // A script just written may be busy for a moment when another test forks meanwhile.
    for attempt in 1.. {
        match resident
            .run("test", &args, &env, share, Duration::from_secs(5))
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
    let resident = resident(dir.path(), Duration::from_millis(500));
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
    let resident = resident(dir.path(), Duration::from_secs(60));
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
    let resident = resident(dir.path(), Duration::from_secs(60));
    let first = call(&resident, "a").await.unwrap();
    let error = call(&resident, "die").await.unwrap_err();
    assert!(matches!(error, Error::OutOfMemory { .. }), "{error}");
    assert_ne!(call(&resident, "b").await.unwrap(), first);
}

#[tokio::test]
async fn a_call_that_spends_its_cpu_time_stops_its_engine_before_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let resident = resident(dir.path(), Duration::from_secs(60));
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

#[tokio::test]
async fn a_call_its_engines_history_would_fail_runs_again_in_a_fresh_engine() {
    let dir = tempfile::tempdir().unwrap();
    let resident = resident(dir.path(), Duration::from_secs(60));
    let first = call(&resident, "a").await.unwrap();
    let answered = call(&resident, "fragile").await.unwrap();
    assert_ne!(answered, first, "a fresh engine answered");
    // A fresh engine that dies too tells the death.
    let error = call(&resident, "die").await.unwrap_err();
    assert!(matches!(error, Error::OutOfMemory { .. }), "{error}");
}

#[tokio::test]
async fn an_engine_grown_past_its_recycling_size_stops_after_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        recycle_at: 0,
        ..LIMITS
    };
    let resident = Resident::new(stand_in(dir.path()), 1, Duration::from_secs(60), limits);
    let first = call(&resident, "a").await.unwrap();
    assert!(resident.slots[0].lock().await.engine.is_none(), "stopped");
    assert_ne!(call(&resident, "b").await.unwrap(), first);
}

#[tokio::test]
async fn a_crash_is_told_by_how_the_engine_exited_and_none_of_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let resident = resident(dir.path(), Duration::from_secs(60));
    let error = call(&resident, "crash").await.unwrap_err();
    let Error::Crashed { how, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(how, "Go's runtime stopped it with a fatal error");
    let message = error.to_string();
    assert!(
        !message.contains("0x4a3b2c") && !message.contains("secret-value"),
        "{message}"
    );
    assert!(call(&resident, "a").await.is_ok(), "replaced");
}

#[tokio::test]
async fn engines_go_to_release_namespaces_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let resident = resident(dir.path(), Duration::from_secs(60));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for (share, word) in [
        ("busy", "spin"),
        ("busy", "spin"),
        ("busy", "spin"),
        ("busy", "spin"),
        ("quiet", "a"),
    ] {
        let (resident, finished) = (resident.clone(), finished.clone());
        calls.push(tokio::spawn(async move {
            let _ = call_for(&resident, share, word).await;
            lock(&finished).push(share);
        }));
        // Each call waits before the next one asks.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for call in calls {
        call.await.unwrap();
    }
    let finished = lock(&finished).clone();
    assert_eq!(
        finished,
        ["busy", "busy", "quiet", "busy", "busy"],
        "the quiet namespace waits for one turn of the busy one, not for all of its renders"
    );
}
