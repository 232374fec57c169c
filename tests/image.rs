//! The image `make image` builds (e2e/image.sh, no container engine) declares what the
//! Dockerfile's final stage declares — entrypoint, user, environment, port — and holds the files
//! it copies and those the chart relies on, with every shared library the binary loads.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// What the Dockerfile's final stage declares.
#[derive(Debug, Default)]
struct Declared {
    entrypoint: Vec<String>,
    user: String,
    env: BTreeMap<String, String>,
    expose: Vec<String>,
    files: Vec<String>,
}

fn dockerfile() -> Declared {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
        .expect("read the Dockerfile");
    // Continuation lines joined, comments dropped, then only what follows the last FROM.
    let joined = text
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().collect();
    let last = lines
        .iter()
        .rposition(|line| line.starts_with("FROM "))
        .expect("a FROM");
    let mut declared = Declared::default();
    for line in &lines[last + 1..] {
        let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
        let words: Vec<&str> = rest.split_whitespace().collect();
        match instruction {
            "ENV" => {
                for pair in words {
                    let (key, value) = pair.split_once('=').expect("ENV key=value");
                    declared.env.insert(key.to_string(), value.to_string());
                }
            }
            "USER" => declared.user = rest.trim().to_string(),
            "EXPOSE" => declared
                .expose
                .extend(words.iter().map(|port| format!("{port}/tcp"))),
            "ENTRYPOINT" => {
                declared.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT as JSON")
            }
            "COPY" => declared.files.push(
                words
                    .last()
                    .expect("a COPY destination")
                    .trim_start_matches('/')
                    .to_string(),
            ),
            "" => {}
            other => panic!("the image recipe does not know Dockerfile instruction {other}"),
        }
    }
    declared
}

#[test]
fn the_image_declares_what_the_dockerfile_declares() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("image.tar");
    let binary = env!("CARGO_BIN_EXE_compositor");
    let status = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/image.sh"))
        .env("COMPOSITOR_BIN", binary)
        .env("IMAGE_ARCHIVE", &archive)
        .status()
        .expect("run e2e/image.sh");
    assert!(status.success(), "e2e/image.sh failed");

    let unpacked = dir.path().join("archive");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(&unpacked).unwrap();
    std::fs::create_dir_all(&rootfs).unwrap();
    untar(&archive, &unpacked);
    let read = |path: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).expect("JSON")
    };
    // Docker's manifest.json and the OCI index name the same config and layer.
    let docker = read(&unpacked.join("manifest.json"));
    let index = read(&unpacked.join("index.json"));
    let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap();
    let manifest = read(&blob(&unpacked, manifest_digest));
    let config_path = blob(&unpacked, manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(
        docker[0]["Config"].as_str().unwrap(),
        config_path
            .strip_prefix(&unpacked)
            .unwrap()
            .to_str()
            .unwrap()
    );
    let config = read(&config_path)["config"].clone();
    untar(
        &blob(&unpacked, manifest["layers"][0]["digest"].as_str().unwrap()),
        &rootfs,
    );

    let declared = dockerfile();
    assert_eq!(config["Entrypoint"], serde_json::json!(declared.entrypoint));
    assert_eq!(config["User"], declared.user.as_str());
    let env: BTreeMap<String, String> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            let (key, value) = pair.as_str().unwrap().split_once('=').unwrap();
            (key.to_string(), value.to_string())
        })
        .collect();
    for (key, value) in &declared.env {
        assert_eq!(env.get(key), Some(value), "ENV {key}");
    }
    for port in &declared.expose {
        assert!(config["ExposedPorts"].get(port).is_some(), "EXPOSE {port}");
    }
    // The files the Dockerfile copies, and what its distroless base gives that the chart needs:
    // the nonroot user, CA certificates and a /tmp.
    for file in declared.files.iter().map(String::as_str).chain([
        "etc/passwd",
        "etc/ssl/certs/ca-certificates.crt",
        "tmp",
    ]) {
        assert!(rootfs.join(file).exists(), "{file} in the image");
    }
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    let uid = declared.user.split(':').next().unwrap();
    assert!(
        passwd
            .lines()
            .any(|line| line.split(':').nth(2) == Some(uid)),
        "user {uid} in /etc/passwd"
    );
    // The binary is linked against glibc: every library it loads is in the image.
    let ldd = Command::new("ldd").arg(binary).output().expect("run ldd");
    for path in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
    {
        assert!(
            rootfs.join(path.trim_start_matches('/')).exists(),
            "{path} in the image"
        );
    }
}

fn blob(dir: &Path, digest: &str) -> std::path::PathBuf {
    dir.join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").expect("a sha256 digest"))
}

fn untar(archive: &Path, into: &Path) {
    let status = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .arg("--no-same-owner")
        .status()
        .expect("run tar");
    assert!(status.success(), "tar -xf {}", archive.display());
}
