//! A small real HTTP(S) server on 127.0.0.1 for chart tests that need what the test bed's
//! repository cannot do (tampered files, absolute URLs to another host, redirects, TLS with a
//! CA made here), plus helpers to build chart archives.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `GET /index.yaml`.
    pub line: String,
    /// The path.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// What to answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with a body.
    pub fn ok(body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status: 200,
            headers: vec![],
            body: body.into(),
        }
    }

    /// A status with no body.
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: vec![],
            body: vec![],
        }
    }

    /// A 302 to `location`.
    pub fn redirect(location: &str) -> Self {
        Reply {
            status: 302,
            headers: vec![("Location".into(), location.into())],
            body: vec![],
        }
    }
}

type Route = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A running server.
pub struct Server {
    /// Its address.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT` or `https://…`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    basic_auth: Arc<Mutex<Option<String>>>,
}

impl Server {
    /// Starts a plain HTTP server.
    pub async fn http() -> Server {
        Self::start(None).await
    }

    /// Starts an HTTPS server with `tls`.
    pub async fn https(tls: Arc<rustls::ServerConfig>) -> Server {
        Self::start(Some(tls)).await
    }

    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = Server {
            addr,
            url: format!("{scheme}://127.0.0.1:{}", addr.port()),
            seen: Default::default(),
            routes: Default::default(),
            basic_auth: Default::default(),
        };
        let seen = server.seen.clone();
        let routes = server.routes.clone();
        let auth = server.basic_auth.clone();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, routes, auth, acceptor) =
                    (seen.clone(), routes.clone(), auth.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            // A failed handshake (untrusted CA on the client) just drops.
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, seen, routes, auth).await;
                            }
                        }
                        None => serve(stream, seen, routes, auth).await,
                    }
                });
            }
        });
        server
    }

    /// Requires `Authorization: Basic base64(user:password)` on every request.
    pub fn require_basic_auth(&self, user: &str, password: &str) {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        *self.basic_auth.lock().unwrap() = Some(format!("Basic {token}"));
    }

    /// Serves `body` at `path`.
    pub fn file(&self, path: &str, body: impl Into<Vec<u8>>) {
        let body = body.into();
        self.route(path, move |_| Reply::ok(body.clone()));
    }

    /// Answers `path` with `reply`.
    pub fn route(&self, path: &str, reply: impl Fn(&Seen) -> Reply + Send + Sync + 'static) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_string(), Arc::new(reply));
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// How many requests so far.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    seen: Arc<Mutex<Vec<Seen>>>,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    auth: Arc<Mutex<Option<String>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("").to_string();
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let authorization = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_string());
    let request = Seen {
        line,
        path: path.clone(),
        authorization,
    };
    seen.lock().unwrap().push(request.clone());
    let required = auth.lock().unwrap().clone();
    let route_path = path.split('?').next().unwrap_or("").to_string();
    let route = routes.lock().unwrap().get(&route_path).cloned();
    let reply = match (required, route) {
        (Some(required), _) if request.authorization.as_deref() != Some(required.as_str()) => {
            let mut r = Reply::status(401);
            r.headers
                .push(("WWW-Authenticate".into(), "Basic realm=\"charts\"".into()));
            r
        }
        (_, Some(route)) => route(&request),
        (_, None) => Reply::status(404),
    };
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = stream.write_all(out.as_bytes()).await;
    let _ = stream.write_all(&reply.body).await;
    let _ = stream.shutdown().await;
}

/// A packaged chart `name-version.tgz` with a Chart.yaml, values.yaml and one template.
pub fn chart_tgz(name: &str, version: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let files = [
        (
            "Chart.yaml",
            format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
        ),
        ("values.yaml", format!("chartVersion: \"{version}\"\n")),
        (
            "templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".to_string(),
        ),
    ];
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, format!("{name}/{path}"), content.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One `index.yaml` entry: (version, url, digest).
pub fn index_yaml(name: &str, entries: &[(&str, &str, Option<&str>)]) -> String {
    let mut out = format!("apiVersion: v1\nentries:\n  {name}:\n");
    for (version, url, digest) in entries {
        out.push_str(&format!(
            "  - apiVersion: v2\n    name: {name}\n    version: {version}\n    urls:\n    - {url}\n"
        ));
        if let Some(d) = digest {
            out.push_str(&format!("    digest: {d}\n"));
        }
    }
    out
}

/// A CA and a server certificate for 127.0.0.1 signed by it: (CA PEM, server TLS config).
pub fn tls_with_own_ca() -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "compositor test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();

    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (ca.pem(), Arc::new(config))
}
