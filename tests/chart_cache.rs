//! A cached chart costs no request: counted in the test bed repository's own request log.
//! One test in this file, so no other test of this binary writes to the log meanwhile.

mod support;

use std::time::Duration;

use compositor::chart::{Cache, ChartRef, fetch};
use support::env;

fn log_lines() -> Vec<String> {
    std::fs::read_to_string(env("COMPOSITOR_TEST_REPO_LOG"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn repo(version: &str) -> ChartRef {
    ChartRef::new(env("COMPOSITOR_TEST_REPO_URL"))
        .with_repo("fireworks-app")
        .with_version(version)
        .with_basic_auth(
            env("COMPOSITOR_TEST_REPO_USERNAME"),
            env("COMPOSITOR_TEST_REPO_PASSWORD"),
        )
}

#[tokio::test]
async fn cached_fetches_make_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path(), 100 * 1024 * 1024, Duration::from_secs(3)).unwrap();

    // Exact version: index + chart the first time, nothing afterwards.
    let before = log_lines().len();
    let first = fetch(&repo("1.1.5"), &cache).await.unwrap();
    let made: Vec<String> = log_lines()[before..].to_vec();
    assert_eq!(
        made,
        ["GET /index.yaml 200", "GET /fireworks-app-1.1.5.tgz 200"],
        "first fetch"
    );
    let before = log_lines().len();
    for _ in 0..3 {
        let again = fetch(&repo("1.1.5"), &cache).await.unwrap();
        assert_eq!(again.digest, first.digest);
        assert_eq!(again.archive_path, first.archive_path);
    }
    assert_eq!(
        log_lines().len(),
        before,
        "a cached exact version made requests"
    );

    // After a restart (a new Cache on the same directory) too.
    let restarted = Cache::new(dir.path(), 100 * 1024 * 1024, Duration::from_secs(3)).unwrap();
    assert_eq!(
        fetch(&repo("1.1.5"), &restarted).await.unwrap().digest,
        first.digest
    );
    assert_eq!(log_lines().len(), before, "a restart lost the cache");

    // Range: the index read a moment ago is still fresh (one poll interval), so only the
    // chart is downloaded, once.
    let before = log_lines().len();
    assert_eq!(fetch(&repo("~1.1"), &cache).await.unwrap().version, "1.1.6");
    assert_eq!(fetch(&repo("~1.1"), &cache).await.unwrap().version, "1.1.6");
    assert_eq!(
        log_lines()[before..].to_vec(),
        ["GET /fireworks-app-1.1.6.tgz 200"],
        "range within the poll interval"
    );
    // The range resolved to a version that is now cached as exact too.
    let before = log_lines().len();
    fetch(&repo("1.1.6"), &cache).await.unwrap();
    assert_eq!(log_lines().len(), before);

    tokio::time::sleep(Duration::from_millis(3100)).await;
    let before = log_lines().len();
    assert_eq!(fetch(&repo("~1.1"), &cache).await.unwrap().version, "1.1.6");
    assert_eq!(
        log_lines()[before..].to_vec(),
        ["GET /index.yaml 200"],
        "range after the poll interval: index only"
    );

    // A different repo (chart name) under the same URL is a different cache entry.
    let before = log_lines().len();
    let other = ChartRef::new(env("COMPOSITOR_TEST_REPO_URL"))
        .with_repo("plain")
        .with_version("0.1.0")
        .with_basic_auth(
            env("COMPOSITOR_TEST_REPO_USERNAME"),
            env("COMPOSITOR_TEST_REPO_PASSWORD"),
        );
    assert_eq!(fetch(&other, &cache).await.unwrap().package.name(), "plain");
    assert_eq!(log_lines().len(), before + 2);
}
