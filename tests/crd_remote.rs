//! `compositor crd` with remote chart references and credentials from standard input.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn crd(args: &[&str], password: &str) -> Output {
    let cache = tempfile::tempdir().expect("cache dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_compositor"))
        .arg("crd")
        .args(args)
        .arg("--cache-dir")
        .arg(cache.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run compositor crd");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(password.as_bytes())
        .expect("password");
    child.wait_with_output().expect("wait")
}

#[test]
fn reads_charts_from_the_oci_registry_and_the_repository_with_credentials() {
    let registry = format!("oci://{}/charts", support::env("COMPOSITOR_TEST_REGISTRY"));
    let user = support::env("COMPOSITOR_TEST_REGISTRY_USERNAME");
    let password = support::env("COMPOSITOR_TEST_REGISTRY_PASSWORD");
    let out = crd(
        &[
            &registry,
            "--repo",
            "fireworks-app",
            "--chart-version",
            "~1.1.0",
            "--username",
            &user,
            "--password-stdin",
        ],
        &password,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("name: fireworksapps.composition.compositor.dev"),
        "{stdout}"
    );
    assert!(
        stdout.contains("name: v1-1-6"),
        "the highest version in the range: {stdout}"
    );

    let repo = support::env("COMPOSITOR_TEST_REPO_URL");
    let user = support::env("COMPOSITOR_TEST_REPO_USERNAME");
    let password = support::env("COMPOSITOR_TEST_REPO_PASSWORD");
    let out = crd(
        &[
            &repo,
            "--repo",
            "tenant-addon",
            "--username",
            &user,
            "--password-stdin",
        ],
        &password,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("kind: TenantAddon"));
}

#[test]
fn a_wrong_password_fails_without_showing_it() {
    let repo = support::env("COMPOSITOR_TEST_REPO_URL");
    let out = crd(
        &[
            &repo,
            "--repo",
            "tenant-addon",
            "--username",
            "charts",
            "--password-stdin",
        ],
        "hunter2-wrong",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("authentication") && stderr.contains(&repo),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
