//! Fetching against small real HTTP(S) servers started here, for what the test bed's repository
//! cannot show: absolute chart URLs on another host, redirects, tampered charts, TLS with a CA
//! made by the test, direct `.tgz` URLs, size limits, and request counts per test.

mod chart_support;

use std::time::Duration;

use chart_support::{Reply, Server, chart_tgz, index_yaml, sha256_hex, tls_with_own_ca};
use compositor::chart::{
    CHART_LAYER_MEDIA_TYPE, Cache, ChartRef, Error, Limits, fetch, fetch_with_limits,
};

const PASSWORD: &str = "s3cret-Pa55word";

fn new_cache() -> (tempfile::TempDir, Cache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path(), 100 * 1024 * 1024, Duration::from_secs(300)).unwrap();
    (dir, cache)
}

fn assert_no_secret(err: &Error) {
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    assert!(!format!("{err:?}").contains(PASSWORD), "{err:?}");
}

/// A repository at `server` with `app` 1.0.0 and 1.1.0 at relative URLs (1.1.0 in a subfolder).
fn repository(server: &Server) -> (Vec<u8>, Vec<u8>) {
    let v1 = chart_tgz("app", "1.0.0");
    let v11 = chart_tgz("app", "1.1.0");
    server.file("/charts/app-1.0.0.tgz", v1.clone());
    server.file("/charts/sub/app-1.1.0.tgz", v11.clone());
    server.file(
        "/charts/index.yaml",
        index_yaml(
            "app",
            &[
                ("1.0.0", "app-1.0.0.tgz", Some(&sha256_hex(&v1))),
                ("1.1.0", "sub/app-1.1.0.tgz", Some(&sha256_hex(&v11))),
            ],
        ),
    );
    (v1, v11)
}

#[tokio::test]
async fn relative_chart_urls_and_request_counts() {
    let server = Server::http().await;
    server.require_basic_auth("bot", PASSWORD);
    let (v1, _) = repository(&server);
    let (_dir, cache) = new_cache();
    let chart = ChartRef::new(format!("{}/charts", server.url))
        .with_repo("app")
        .with_version("1.0.0")
        .with_basic_auth("bot", PASSWORD);

    let fetched = fetch(&chart, &cache).await.unwrap();
    assert_eq!(fetched.url, format!("{}/charts/app-1.0.0.tgz", server.url));
    assert_eq!(fetched.digest, format!("sha256:{}", sha256_hex(&v1)));
    let paths: Vec<String> = server.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(paths, ["/charts/index.yaml", "/charts/app-1.0.0.tgz"]);
    // Basic auth went with both the index and the chart.
    assert!(server.seen().iter().all(|s| s.authorization.is_some()));

    // Cached: no request at all.
    let again = fetch(&chart, &cache).await.unwrap();
    assert_eq!(again.digest, fetched.digest);
    assert_eq!(server.count(), 2);

    // A range in a subfolder; its index is fresh, so one request: the chart.
    let range = chart.clone().with_version(">=1.0.0");
    let fetched = fetch(&range, &cache).await.unwrap();
    assert_eq!(fetched.version, "1.1.0");
    assert_eq!(
        fetched.url,
        format!("{}/charts/sub/app-1.1.0.tgz", server.url)
    );
    assert_eq!(server.count(), 3);
    fetch(&range, &cache).await.unwrap();
    assert_eq!(server.count(), 3);
}

#[tokio::test]
async fn absolute_chart_urls_on_another_host_get_no_credentials() {
    let repo = Server::http().await;
    let cdn = Server::http().await;
    let tgz = chart_tgz("app", "2.0.0");
    cdn.file("/dl/app-2.0.0.tgz", tgz.clone());
    repo.file(
        "/index.yaml",
        index_yaml(
            "app",
            &[(
                "2.0.0",
                &format!("{}/dl/app-2.0.0.tgz", cdn.url),
                Some(&sha256_hex(&tgz)),
            )],
        ),
    );
    let (_dir, cache) = new_cache();
    let chart = ChartRef::new(&repo.url)
        .with_repo("app")
        .with_basic_auth("bot", PASSWORD);
    let fetched = fetch(&chart, &cache).await.unwrap();
    assert_eq!(fetched.version, "2.0.0");
    assert_eq!(fetched.url, format!("{}/dl/app-2.0.0.tgz", cdn.url));
    assert!(repo.seen()[0].authorization.is_some());
    assert_eq!(cdn.count(), 1);
    assert_eq!(
        cdn.seen()[0].authorization,
        None,
        "credentials leaked to another host"
    );
}

#[tokio::test]
async fn redirects_to_another_host_drop_credentials() {
    let repo = Server::http().await;
    let other = Server::http().await;
    let tgz = chart_tgz("app", "1.0.0");
    other.file("/elsewhere/app-1.0.0.tgz", tgz.clone());
    repo.file(
        "/index.yaml",
        index_yaml(
            "app",
            &[("1.0.0", "app-1.0.0.tgz", Some(&sha256_hex(&tgz)))],
        ),
    );
    let target = format!("{}/elsewhere/app-1.0.0.tgz", other.url);
    repo.route("/app-1.0.0.tgz", move |_| Reply::redirect(&target));
    let (_dir, cache) = new_cache();
    let chart = ChartRef::new(&repo.url)
        .with_repo("app")
        .with_version("1.0.0")
        .with_basic_auth("bot", PASSWORD);
    fetch(&chart, &cache).await.unwrap();
    assert!(repo.seen().iter().all(|s| s.authorization.is_some()));
    assert_eq!(other.count(), 1);
    assert_eq!(
        other.seen()[0].authorization,
        None,
        "credentials followed a redirect"
    );
}

#[tokio::test]
async fn tampered_charts_are_refused() {
    let server = Server::http().await;
    let genuine = chart_tgz("app", "1.0.0");
    let tampered = chart_tgz("app", "1.0.0-evil");
    server.file(
        "/index.yaml",
        index_yaml(
            "app",
            &[("1.0.0", "app-1.0.0.tgz", Some(&sha256_hex(&genuine)))],
        ),
    );
    server.file("/app-1.0.0.tgz", tampered.clone());
    let (dir, cache) = new_cache();
    let chart = ChartRef::new(&server.url)
        .with_repo("app")
        .with_version("1.0.0")
        .with_basic_auth("bot", PASSWORD);
    let err = fetch(&chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), "DigestMismatch", "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}/app-1.0.0.tgz", server.url)),
        "{text}"
    );
    assert!(text.contains("1.0.0"), "{text}");
    assert!(text.contains(&sha256_hex(&genuine)), "{text}");
    assert!(text.contains(&sha256_hex(&tampered)), "{text}");
    assert_no_secret(&err);
    // Nothing was cached.
    let blobs = std::fs::read_dir(dir.path().join("blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(blobs, 0);
}

#[tokio::test]
async fn wrong_password_on_the_chart_download_is_an_authentication_failure() {
    let server = Server::http().await;
    server.file(
        "/index.yaml",
        index_yaml("app", &[("1.0.0", "app-1.0.0.tgz", None)]),
    );
    server.route("/app-1.0.0.tgz", |_| Reply::status(403));
    let (_dir, cache) = new_cache();
    let chart = ChartRef::new(&server.url)
        .with_repo("app")
        .with_version("1.0.0")
        .with_basic_auth("bot", PASSWORD);
    let err = fetch(&chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), "AuthenticationFailed");
    assert!(err.to_string().contains("/app-1.0.0.tgz"), "{err}");
    assert_no_secret(&err);

    // Credentials in the URL are used, and never shown.
    let server = Server::http().await;
    server.require_basic_auth("bot", PASSWORD);
    let with_userinfo = format!(
        "http://bot:wrong{PASSWORD}@127.0.0.1:{}/",
        server.addr.port()
    );
    let err = fetch(&ChartRef::new(with_userinfo).with_repo("app"), &cache)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "AuthenticationFailed");
    assert_no_secret(&err);
    assert!(!err.to_string().contains("bot:"), "{err}");
}

#[tokio::test]
async fn custom_ca_and_skip_verify() {
    let (ca_pem, tls) = tls_with_own_ca();
    let server = Server::https(tls).await;
    repository(&server);
    let chart = ChartRef::new(format!("{}/charts", server.url))
        .with_repo("app")
        .with_version("1.0.0");

    // Unknown CA: refused.
    let (_dir, cache) = new_cache();
    let err = fetch(&chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), "RepositoryUnreachable", "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // The CA from the bundle.
    let mut with_ca = chart.clone();
    with_ca.ca_bundle = Some(ca_pem.clone().into_bytes());
    assert_eq!(fetch(&with_ca, &cache).await.unwrap().version, "1.0.0");

    // Verification off.
    let (_dir2, cache2) = new_cache();
    let mut insecure = chart.clone();
    insecure.insecure_skip_verify_tls = true;
    assert_eq!(fetch(&insecure, &cache2).await.unwrap().version, "1.0.0");

    // A direct .tgz URL over TLS uses the same settings.
    let (_dir3, cache3) = new_cache();
    let mut direct = ChartRef::new(format!("{}/charts/app-1.0.0.tgz", server.url));
    let err = fetch(&direct, &cache3).await.unwrap_err();
    assert_eq!(err.reason(), "RepositoryUnreachable", "{err}");
    direct.ca_bundle = Some(ca_pem.into_bytes());
    assert_eq!(fetch(&direct, &cache3).await.unwrap().version, "1.0.0");

    // A bundle without a certificate is refused with a clear message.
    let mut garbage = chart.clone();
    garbage.ca_bundle = Some(b"not a certificate".to_vec());
    let err = fetch(&garbage, &cache3).await.unwrap_err();
    assert!(err.to_string().contains("CA bundle"), "{err}");
}

#[tokio::test]
async fn direct_archive_urls() {
    let server = Server::http().await;
    let tgz = chart_tgz("app", "3.1.0");
    server.file("/files/app-3.1.0.tgz", tgz.clone());
    let (_dir, cache) = new_cache();
    let url = format!("{}/files/app-3.1.0.tgz", server.url);
    let fetched = fetch(&ChartRef::new(&url), &cache).await.unwrap();
    assert_eq!(fetched.version, "3.1.0");
    assert_eq!(fetched.digest, format!("sha256:{}", sha256_hex(&tgz)));
    fetch(&ChartRef::new(&url), &cache).await.unwrap();
    assert_eq!(
        server.count(),
        1,
        "a cached archive URL was downloaded again"
    );

    let err = fetch(&ChartRef::new(&url).with_version("3.2.0"), &cache)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "VersionNotFound", "{err}");
    let junk = format!("{}/files/junk-1.0.0.tgz", server.url);
    server.file("/files/junk-1.0.0.tgz", "<html>not a chart</html>");
    let err = fetch(&ChartRef::new(&junk), &cache).await.unwrap_err();
    assert_eq!(err.reason(), "InvalidChart", "{err}");
    assert!(err.to_string().contains(&junk), "{err}");

    let missing = format!("{}/files/nope-1.0.0.tgz", server.url);
    let err = fetch(&ChartRef::new(&missing), &cache).await.unwrap_err();
    assert_eq!(err.reason(), "ChartNotFound", "{err}");
    assert!(err.to_string().contains(&missing), "{err}");
}

#[tokio::test]
async fn oversized_downloads_are_refused() {
    let server = Server::http().await;
    server.file("/big.tgz", vec![0u8; 64 * 1024]);
    let (_dir, cache) = new_cache();
    let limits = Limits {
        max_archive_size: 16 * 1024,
        ..Limits::default()
    };
    let err = fetch_with_limits(
        &ChartRef::new(format!("{}/big.tgz", server.url)),
        &cache,
        limits,
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "ChartTooLarge", "{err}");
}

/// The minimal registry API (version check, manifest, blob) over TLS, to show the OCI path
/// honours a custom CA and skip-verify, accepts a provenance layer and verifies the digest.
#[tokio::test]
async fn oci_over_tls_with_provenance_and_digest_check() {
    let (ca_pem, tls) = tls_with_own_ca();
    let server = Server::https(tls).await;
    let tgz = chart_tgz("app", "1.2.3+build.4");
    let digest = format!("sha256:{}", sha256_hex(&tgz));
    let prov = b"-----BEGIN PGP SIGNED MESSAGE-----\n...".to_vec();
    let manifest = |layer_digest: &str| {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                       "digest": format!("sha256:{}", sha256_hex(b"{}")), "size": 2},
            "layers": [
                {"mediaType": "application/vnd.cncf.helm.chart.provenance.v1.prov",
                 "digest": format!("sha256:{}", sha256_hex(&prov)), "size": prov.len()},
                {"mediaType": CHART_LAYER_MEDIA_TYPE, "digest": layer_digest, "size": tgz.len()}
            ]
        })
        .to_string()
    };
    let manifest_reply = |body: String| {
        move |_: &chart_support::Seen| Reply {
            status: 200,
            headers: vec![(
                "Content-Type".into(),
                "application/vnd.oci.image.manifest.v1+json".into(),
            )],
            body: body.clone().into_bytes(),
        }
    };
    server.file("/v2/", "{}");
    // Tags carry `_` for `+`.
    server.route(
        "/v2/charts/app/manifests/1.2.3_build.4",
        manifest_reply(manifest(&digest)),
    );
    server.file(&format!("/v2/charts/app/blobs/{digest}"), tgz.clone());
    let wrong = format!("sha256:{}", sha256_hex(b"something else"));
    server.route(
        "/v2/charts/app/manifests/6.6.6",
        manifest_reply(manifest(&wrong)),
    );
    server.file(&format!("/v2/charts/app/blobs/{wrong}"), tgz.clone());

    let chart = ChartRef::new(format!("oci://127.0.0.1:{}/charts", server.addr.port()))
        .with_repo("app")
        .with_version("1.2.3+build.4");
    let (_dir, cache) = new_cache();
    let err = fetch(&chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), "RepositoryUnreachable", "unknown CA: {err}");

    let mut with_ca = chart.clone();
    with_ca.ca_bundle = Some(ca_pem.into_bytes());
    let fetched = fetch(&with_ca, &cache).await.unwrap();
    assert_eq!(fetched.version, "1.2.3+build.4");
    assert_eq!(fetched.digest, digest);
    assert_eq!(
        fetched.url,
        format!(
            "oci://127.0.0.1:{}/charts/app:1.2.3_build.4",
            server.addr.port()
        )
    );

    // Cached: an exact version makes no request; a range reads the tag list once per poll
    // interval and finds the chart in the cache.
    let requests = server.count();
    fetch(&with_ca, &cache).await.unwrap();
    assert_eq!(server.count(), requests);
    server.file(
        "/v2/charts/app/tags/list",
        r#"{"name":"charts/app","tags":["1.2.3_build.4","6.6.6","latest"]}"#,
    );
    let range = with_ca.clone().with_version("~1.2");
    assert_eq!(fetch(&range, &cache).await.unwrap().digest, digest);
    let after_range: Vec<String> = server.seen()[requests..]
        .iter()
        .map(|s| s.path.clone())
        .filter(|p| p != "/v2/")
        .collect();
    assert_eq!(after_range, ["/v2/charts/app/tags/list?n=1000"]);
    let requests = server.count();
    assert_eq!(fetch(&range, &cache).await.unwrap().digest, digest);
    assert_eq!(server.count(), requests);

    let (_dir2, cache2) = new_cache();
    let mut insecure = chart.clone();
    insecure.insecure_skip_verify_tls = true;
    assert_eq!(fetch(&insecure, &cache2).await.unwrap().digest, digest);

    let tampered = insecure.clone().with_version("6.6.6");
    let err = fetch(&tampered, &cache2).await.unwrap_err();
    assert_eq!(err.reason(), "DigestMismatch", "{err}");
    assert!(err.to_string().contains("6.6.6"), "{err}");
}

#[tokio::test]
async fn redirects_from_https_to_plain_http_are_refused() {
    let (_, tls) = tls_with_own_ca();
    let secure = Server::https(tls).await;
    let plain = Server::http().await;
    plain.file("/index.yaml", index_yaml("app", &[]));
    let target = format!("{}/index.yaml", plain.url);
    secure.route("/index.yaml", move |_| Reply::redirect(&target));
    let (_dir, cache) = new_cache();
    let mut chart = ChartRef::new(&secure.url)
        .with_repo("app")
        .with_basic_auth("bot", PASSWORD);
    chart.insecure_skip_verify_tls = true;
    let err = fetch(&chart, &cache).await.unwrap_err();
    assert_eq!(err.reason(), "RepositoryUnreachable", "{err}");
    assert!(err.to_string().contains("redirect"), "{err}");
    assert_eq!(plain.count(), 0);
    assert_no_secret(&err);
}

/// A registry that wants a bearer token from its token service (the Docker token flow), which
/// hands it out for basic credentials.
#[tokio::test]
async fn oci_token_authentication() {
    let server = Server::http().await;
    let token_url = format!("{}/token", server.url);
    let tgz = chart_tgz("app", "0.3.0");
    let digest = format!("sha256:{}", sha256_hex(&tgz));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                   "digest": format!("sha256:{}", sha256_hex(b"{}")), "size": 2},
        "layers": [{"mediaType": CHART_LAYER_MEDIA_TYPE, "digest": digest, "size": tgz.len()}]
    })
    .to_string();
    let challenge = move || {
        let mut r = Reply::status(401);
        r.headers.push((
            "WWW-Authenticate".into(),
            format!(
                r#"Bearer realm="{token_url}",service="test",scope="repository:charts/app:pull""#
            ),
        ));
        r
    };
    let guarded = |reply: Reply, challenge: Box<dyn Fn() -> Reply + Send + Sync>| {
        move |seen: &chart_support::Seen| {
            if seen.authorization.as_deref() == Some("Bearer tok-123") {
                reply.clone()
            } else {
                challenge()
            }
        }
    };
    server.route(
        "/v2/",
        guarded(Reply::ok("{}"), Box::new(challenge.clone())),
    );
    let mut manifest_reply = Reply::ok(manifest);
    manifest_reply.headers.push((
        "Content-Type".into(),
        "application/vnd.oci.image.manifest.v1+json".into(),
    ));
    server.route(
        "/v2/charts/app/manifests/0.3.0",
        guarded(manifest_reply, Box::new(challenge.clone())),
    );
    server.route(
        &format!("/v2/charts/app/blobs/{digest}"),
        guarded(Reply::ok(tgz.clone()), Box::new(challenge.clone())),
    );
    use base64::Engine;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("bot:{PASSWORD}"))
    );
    server.route("/token", move |seen| {
        if seen.authorization.as_deref() == Some(basic.as_str()) {
            Reply::ok(r#"{"token":"tok-123"}"#)
        } else {
            Reply::status(401)
        }
    });

    let chart = ChartRef::new(format!("oci://127.0.0.1:{}/charts", server.addr.port()))
        .with_repo("app")
        .with_version("0.3.0")
        .with_basic_auth("bot", PASSWORD);
    let (_dir, cache) = new_cache();
    let fetched = fetch(&chart, &cache).await.unwrap();
    assert_eq!(fetched.digest, digest);
    let seen = server.seen();
    assert!(
        seen.iter().any(|s| s.path.starts_with("/token")),
        "{seen:?}"
    );
    let blob = seen
        .iter()
        .find(|s| s.path.contains("/blobs/"))
        .expect("blob request");
    assert_eq!(blob.authorization.as_deref(), Some("Bearer tok-123"));

    let wrong = ChartRef::new(format!("oci://127.0.0.1:{}/charts", server.addr.port()))
        .with_repo("app")
        .with_version("0.3.0")
        .with_basic_auth("bot", format!("wrong{PASSWORD}"));
    let (_dir2, cache2) = new_cache();
    let err = fetch(&wrong, &cache2).await.unwrap_err();
    assert_eq!(err.reason(), "AuthenticationFailed", "{err}");
    assert_no_secret(&err);
}
