//! Fetching charts from the test bed's real Helm repository (basic auth, `helm repo index`) and
//! real OCI registry (docker-registry with htpasswd, charts pushed by `helm push`).

mod support;

use std::time::Duration;

use compositor::chart::{Cache, ChartRef, Credentials, DockerConfig, Error, Fetched, fetch};
use support::env;

fn new_cache() -> (tempfile::TempDir, Cache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path(), 100 * 1024 * 1024, Duration::from_secs(300)).unwrap();
    (dir, cache)
}

fn repo(chart: &str, version: &str) -> ChartRef {
    ChartRef::new(env("COMPOSITOR_TEST_REPO_URL"))
        .with_repo(chart)
        .with_version(version)
        .with_basic_auth(
            env("COMPOSITOR_TEST_REPO_USERNAME"),
            env("COMPOSITOR_TEST_REPO_PASSWORD"),
        )
}

fn oci(chart: &str, version: &str) -> ChartRef {
    ChartRef::new(format!("oci://{}/charts", env("COMPOSITOR_TEST_REGISTRY")))
        .with_repo(chart)
        .with_version(version)
        .with_basic_auth(
            env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
            env("COMPOSITOR_TEST_REGISTRY_PASSWORD"),
        )
}

/// The digest of the packaged test chart, as `helm package` wrote it.
fn packaged_digest(file: &str) -> String {
    let bytes = std::fs::read(format!("{}/{file}", env("COMPOSITOR_TEST_CHARTS"))).unwrap();
    compositor::chart::sha256_digest(&bytes)
}

async fn ok(chart: &ChartRef) -> Fetched {
    let (_dir, cache) = new_cache();
    let fetched = fetch(chart, &cache).await.unwrap();
    let on_disk = std::fs::read(&fetched.archive_path).unwrap();
    assert_eq!(compositor::chart::sha256_digest(&on_disk), fetched.digest);
    fetched
}

async fn failure(chart: &ChartRef, reason: &str) -> Error {
    let (_dir, cache) = new_cache();
    let err = fetch(chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), reason, "{err}");
    for secret in [
        env("COMPOSITOR_TEST_REPO_PASSWORD"),
        env("COMPOSITOR_TEST_REGISTRY_PASSWORD"),
        "wrong-password-123".to_string(),
    ] {
        assert!(
            !err.to_string().contains(&secret),
            "{err} contains a password"
        );
        assert!(
            !format!("{err:?}").contains(&secret),
            "{err:?} contains a password"
        );
    }
    err
}

#[tokio::test]
async fn repository_exact_version() {
    let fetched = ok(&repo("fireworks-app", "1.1.5")).await;
    assert_eq!(fetched.version, "1.1.5");
    assert_eq!(fetched.package.name(), "fireworks-app");
    assert_eq!(fetched.package.version(), "1.1.5");
    assert!(fetched.package.schema.is_some());
    assert_eq!(fetched.digest, packaged_digest("fireworks-app-1.1.5.tgz"));
    assert_eq!(
        fetched.url,
        format!(
            "{}/fireworks-app-1.1.5.tgz",
            env("COMPOSITOR_TEST_REPO_URL")
        )
    );
}

#[tokio::test]
async fn repository_ranges_pick_the_highest_match() {
    assert_eq!(ok(&repo("fireworks-app", "~1.1")).await.version, "1.1.6");
    assert_eq!(
        ok(&repo("fireworks-app", ">=1.0.0 <2.0.0")).await.version,
        "1.1.6"
    );
    assert_eq!(ok(&repo("fireworks-app", "^2")).await.version, "2.0.0");
    assert_eq!(
        ok(&repo("fireworks-app", "1.1.5 - 1.1.5")).await.version,
        "1.1.5"
    );
}

#[tokio::test]
async fn repository_empty_version_is_the_highest_stable() {
    let fetched = ok(&repo("fireworks-app", "")).await;
    assert_eq!(fetched.version, "2.0.0");
    assert_eq!(fetched.digest, packaged_digest("fireworks-app-2.0.0.tgz"));
}

#[tokio::test]
async fn repository_wrong_password_is_an_authentication_failure() {
    let chart = ChartRef::new(env("COMPOSITOR_TEST_REPO_URL"))
        .with_repo("fireworks-app")
        .with_version("1.1.5")
        .with_basic_auth(env("COMPOSITOR_TEST_REPO_USERNAME"), "wrong-password-123");
    let err = failure(&chart, "AuthenticationFailed").await;
    assert!(err.to_string().contains("/index.yaml"), "{err}");

    let anonymous = ChartRef::new(env("COMPOSITOR_TEST_REPO_URL"))
        .with_repo("fireworks-app")
        .with_version("1.1.5");
    failure(&anonymous, "AuthenticationFailed").await;
}

#[tokio::test]
async fn repository_unknown_chart_version_and_range() {
    let err = failure(&repo("no-such-chart", "1.0.0"), "ChartNotFound").await;
    assert!(err.to_string().contains("no-such-chart"), "{err}");
    assert!(
        err.to_string().contains(&env("COMPOSITOR_TEST_REPO_URL")),
        "{err}"
    );
    let err = failure(&repo("fireworks-app", "9.9.9"), "VersionNotFound").await;
    assert!(err.to_string().contains("9.9.9"), "{err}");
    assert!(
        err.to_string()
            .ends_with("(available: 2.0.0, 1.1.6, 1.1.5)"),
        "{err}"
    );
    failure(&repo("fireworks-app", ">=3"), "VersionNotFound").await;
    let err = failure(&repo("fireworks-app", "not a version"), "InvalidVersion").await;
    assert!(err.to_string().contains("not a version"), "{err}");
}

#[tokio::test]
async fn repository_unreachable() {
    let chart = ChartRef::new("http://127.0.0.1:9")
        .with_repo("fireworks-app")
        .with_version("1.1.5");
    failure(&chart, "RepositoryUnreachable").await;
}

#[tokio::test]
async fn oci_exact_version_with_credentials() {
    let fetched = ok(&oci("fireworks-app", "1.1.5")).await;
    assert_eq!(fetched.version, "1.1.5");
    assert_eq!(fetched.package.name(), "fireworks-app");
    assert_eq!(fetched.digest, packaged_digest("fireworks-app-1.1.5.tgz"));
    assert_eq!(
        fetched.url,
        format!(
            "oci://{}/charts/fireworks-app:1.1.5",
            env("COMPOSITOR_TEST_REGISTRY")
        )
    );

    // The chart can also be named in the URL itself.
    let in_url = ChartRef::new(format!(
        "oci://{}/charts/tenant-addon",
        env("COMPOSITOR_TEST_REGISTRY")
    ))
    .with_version("0.1.0")
    .with_basic_auth(
        env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
        env("COMPOSITOR_TEST_REGISTRY_PASSWORD"),
    );
    assert_eq!(ok(&in_url).await.package.name(), "tenant-addon");
}

#[tokio::test]
async fn oci_ranges_and_highest_stable_tag() {
    assert_eq!(ok(&oci("fireworks-app", "~1.1")).await.version, "1.1.6");
    assert_eq!(ok(&oci("fireworks-app", "")).await.version, "2.0.0");
    assert_eq!(ok(&oci("fireworks-app", "<2")).await.version, "1.1.6");
}

#[tokio::test]
async fn oci_docker_config_credentials() {
    let registry = env("COMPOSITOR_TEST_REGISTRY");
    let config = DockerConfig::parse(
        serde_json::json!({"auths": {
            "other.example.org": {"username": "x", "password": "y"},
            registry.clone(): {
                "username": env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
                "password": env("COMPOSITOR_TEST_REGISTRY_PASSWORD"),
            }
        }})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let mut chart = ChartRef::new(format!("oci://{registry}/charts"))
        .with_repo("plain")
        .with_version("0.1.0");
    chart.credentials = Some(Credentials::DockerConfig(config));
    let fetched = ok(&chart).await;
    assert_eq!(fetched.package.name(), "plain");
    assert!(fetched.package.schema.is_none());
}

#[tokio::test]
async fn oci_failures() {
    let registry = env("COMPOSITOR_TEST_REGISTRY");
    let wrong = ChartRef::new(format!("oci://{registry}/charts"))
        .with_repo("fireworks-app")
        .with_version("1.1.5")
        .with_basic_auth(
            env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
            "wrong-password-123",
        );
    let err = failure(&wrong, "AuthenticationFailed").await;
    assert!(err.to_string().contains(&registry), "{err}");
    let anonymous = ChartRef::new(format!("oci://{registry}/charts"))
        .with_repo("fireworks-app")
        .with_version("1.1.5");
    failure(&anonymous, "AuthenticationFailed").await;
    let err = failure(&oci("no-such-chart", "1.0.0"), "ChartNotFound").await;
    assert!(err.to_string().contains("no-such-chart"), "{err}");
    failure(&oci("no-such-chart", "~1"), "ChartNotFound").await;
    let err = failure(&oci("fireworks-app", "9.9.9"), "VersionNotFound").await;
    assert!(err.to_string().contains("9.9.9"), "{err}");
    assert!(
        err.to_string()
            .ends_with("(available: 2.0.0, 1.1.6, 1.1.5)"),
        "{err}"
    );
    failure(&oci("fireworks-app", ">=3"), "VersionNotFound").await;
}
