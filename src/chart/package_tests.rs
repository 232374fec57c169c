//! Tests of reading charts, including hostile archives built here.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;

use super::*;

/// One archive entry, written with raw header fields so that hostile names survive.
enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    CharDevice(&'a str),
    Fifo(&'a str),
}

fn header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    let bytes = name.as_bytes();
    h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h
}

fn tgz(entries: &[Entry]) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for entry in entries {
        let (mut h, data): (tar::Header, &[u8]) = match entry {
            Entry::File(name, data) => (
                header(name, tar::EntryType::Regular, data.len() as u64),
                data,
            ),
            Entry::Symlink(name, target) | Entry::Hardlink(name, target) => {
                let kind = if matches!(entry, Entry::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                let mut h = header(name, kind, 0);
                let t = target.as_bytes();
                h.as_old_mut().linkname[..t.len()].copy_from_slice(t);
                (h, &[])
            }
            Entry::CharDevice(name) => (header(name, tar::EntryType::Char, 0), &[]),
            Entry::Fifo(name) => (header(name, tar::EntryType::Fifo, 0), &[]),
        };
        h.set_cksum();
        builder.append(&h, data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

const CHART_YAML: &[u8] = b"apiVersion: v2\nname: app\nversion: 1.2.3\n";

fn minimal(extra: Vec<Entry<'static>>) -> Vec<u8> {
    let mut entries = vec![Entry::File("app/Chart.yaml", CHART_YAML)];
    entries.extend(extra);
    tgz(&entries)
}

fn small_limits() -> Limits {
    Limits {
        max_archive_size: 1024 * 1024,
        max_total_size: 64 * 1024,
        max_file_size: 16 * 1024,
        max_files: 20,
        max_depth: 2,
        max_index_size: 1024 * 1024,
    }
}

#[test]
fn reads_a_full_chart() {
    let sub = tgz(&[
        Entry::File(
            "db/Chart.yaml",
            b"apiVersion: v2\nname: db\nversion: 0.1.0\n",
        ),
        Entry::File("db/values.yaml", b"port: 5432\n"),
        Entry::File("db/templates/svc.yaml", b"kind: Service\n"),
    ]);
    let bytes = tgz(&[
        Entry::File(
            "app/Chart.yaml",
            b"apiVersion: v2\nname: app\nversion: 1.2.3\ntype: application\ndescription: An app\ndependencies:\n  - name: db\n    version: ~0.1\n    repository: https://example.org\n    alias: database\n    condition: database.enabled\n  - name: cache\n",
        ),
        Entry::File(
            "app/values.yaml",
            b"replicas: 2\nimage:\n  tag: \"1.0\"\nlist: [a, b]\nbase: &b {x: 1}\nderived: *b\n",
        ),
        Entry::File("app/values.schema.json", br#"{"type":"object"}"#),
        Entry::File("app/templates/deploy.yaml", b"kind: Deployment\n"),
        Entry::File("app/templates/_helpers.tpl", b"{{/* x */}}"),
        Entry::File("app/charts/db-0.1.0.tgz", &sub),
        Entry::File("app/charts/cache/Chart.yaml", b"apiVersion: v2\nname: cache\nversion: 2.0.0\n"),
        Entry::File("app/charts/cache/templates/cm.yaml", b"kind: ConfigMap\n"),
        Entry::File("app/charts/_ignored/Chart.yaml", b"not: read"),
        Entry::File("app/README.md", b"hello"),
    ]);
    let p = Package::from_archive(&bytes).unwrap();
    assert_eq!(p.name(), "app");
    assert_eq!(p.version(), "1.2.3");
    assert_eq!(p.metadata.api_version, "v2");
    assert_eq!(p.metadata.chart_type, ChartType::Application);
    assert_eq!(p.metadata.description.as_deref(), Some("An app"));
    assert_eq!(p.metadata.dependencies.len(), 2);
    let db = &p.metadata.dependencies[0];
    assert_eq!(db.values_key(), "database");
    assert_eq!(db.condition.as_deref(), Some("database.enabled"));
    assert_eq!(db.version.as_deref(), Some("~0.1"));
    assert_eq!(p.metadata.dependencies[1].values_key(), "cache");
    assert_eq!(
        p.values,
        json!({"replicas": 2, "image": {"tag": "1.0"}, "list": ["a", "b"], "base": {"x": 1}, "derived": {"x": 1}})
    );
    assert_eq!(p.schema, Some(json!({"type": "object"})));
    let paths: Vec<&str> = p.templates.iter().map(|t| t.path.as_str()).collect();
    assert_eq!(paths, ["templates/_helpers.tpl", "templates/deploy.yaml"]);
    let names: Vec<&str> = p.subcharts.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["cache", "db"]);
    assert_eq!(p.subcharts[1].values, json!({"port": 5432}));
    let all: Vec<String> = p.all_templates().into_iter().map(|t| t.path).collect();
    assert!(
        all.contains(&"charts/db/templates/svc.yaml".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(&"charts/cache/templates/cm.yaml".to_string()),
        "{all:?}"
    );
}

#[test]
fn v1_charts_read_requirements_and_default_values() {
    let bytes = tgz(&[
        Entry::File("old/Chart.yaml", b"name: old\nversion: v0.9\n"),
        Entry::File(
            "old/requirements.yaml",
            b"dependencies:\n  - name: redis\n    alias: cache\n    condition: cache.enabled\n",
        ),
        Entry::File("old/values.yaml", b"# only a comment\n"),
    ]);
    let p = Package::from_archive(&bytes).unwrap();
    assert_eq!(p.metadata.api_version, "v1");
    assert_eq!(p.version(), "v0.9");
    assert_eq!(p.metadata.dependencies[0].values_key(), "cache");
    assert_eq!(p.values, json!({}));
    assert_eq!(p.schema, None);
}

#[test]
fn reads_a_directory_like_its_archive() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("app");
    std::fs::create_dir_all(root.join("templates")).unwrap();
    std::fs::create_dir_all(root.join("charts/sub/templates")).unwrap();
    std::fs::write(root.join("Chart.yaml"), CHART_YAML).unwrap();
    std::fs::write(root.join("values.yaml"), "a: 1\n").unwrap();
    std::fs::write(root.join("templates/x.yaml"), "kind: Secret\n").unwrap();
    std::fs::write(
        root.join("charts/sub/Chart.yaml"),
        "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(root.join("charts/sub/templates/y.yaml"), "kind: Job\n").unwrap();
    let p = Package::load(&root).unwrap();
    assert_eq!(p.values, json!({"a": 1}));
    assert_eq!(p.templates[0].path, "templates/x.yaml");
    assert_eq!(p.subcharts[0].templates[0].content, "kind: Job\n");

    let file = dir.path().join("app-1.2.3.tgz");
    std::fs::write(
        &file,
        minimal(vec![Entry::File("app/values.yaml", b"a: 1\n")]),
    )
    .unwrap();
    assert_eq!(Package::load(&file).unwrap().values, json!({"a": 1}));
}

#[cfg(unix)]
#[test]
fn directory_symlinks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Chart.yaml"), CHART_YAML).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("values.yaml")).unwrap();
    let err = Package::load(dir.path()).unwrap_err();
    assert_eq!(err.reason(), "InvalidChart");
    assert!(err.to_string().contains("values.yaml"), "{err}");
}

fn refused(bytes: &[u8], limits: Limits) -> Error {
    Package::from_archive_named(bytes, "test.tgz", limits).unwrap_err()
}

/// Loads a hostile archive from disk in a fresh directory and checks that the refusal names
/// the file and that nothing appeared anywhere the archive pointed at.
fn assert_refused_without_writing(entries: Vec<Entry<'static>>, reason: &str, file: &str) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let archive = dir.path().join("hostile.tgz");
    std::fs::write(&archive, minimal(entries)).unwrap();
    let err = Package::load_with_limits(&archive, small_limits()).unwrap_err();
    assert_eq!(err.reason(), reason, "{err}");
    assert!(err.to_string().contains(file), "{err} does not name {file}");
    let mut listing: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    listing.sort();
    assert_eq!(listing, ["hostile.tgz", "target"]);
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    assert!(!Path::new("/tmp/compositor-pwned").exists());
}

#[test]
fn path_traversal_is_refused() {
    assert_refused_without_writing(
        vec![Entry::File("app/../../compositor-pwned", b"x")],
        "InvalidChart",
        "app/../../compositor-pwned",
    );
    assert_refused_without_writing(
        vec![Entry::File("../compositor-pwned", b"x")],
        "InvalidChart",
        "../compositor-pwned",
    );
}

#[test]
fn absolute_paths_are_refused() {
    assert_refused_without_writing(
        vec![Entry::File("/tmp/compositor-pwned", b"x")],
        "InvalidChart",
        "/tmp/compositor-pwned",
    );
}

#[test]
fn links_and_devices_are_refused() {
    assert_refused_without_writing(
        vec![Entry::Symlink("app/values.yaml", "/etc/passwd")],
        "InvalidChart",
        "app/values.yaml",
    );
    assert_refused_without_writing(
        vec![Entry::Hardlink("app/values.yaml", "/etc/passwd")],
        "InvalidChart",
        "app/values.yaml",
    );
    assert_refused_without_writing(
        vec![Entry::CharDevice("app/templates/null")],
        "InvalidChart",
        "app/templates/null",
    );
    assert_refused_without_writing(vec![Entry::Fifo("app/fifo")], "InvalidChart", "app/fifo");
}

#[test]
fn decompression_bombs_are_refused() {
    // 10 MiB of zeros compresses to a few KiB; the per-file limit stops it while reading.
    let zeros = vec![0u8; 10 * 1024 * 1024];
    let bomb: &'static [u8] = Box::leak(zeros.into_boxed_slice());
    let bytes = minimal(vec![Entry::File("app/values.yaml", bomb)]);
    assert!(bytes.len() < 64 * 1024, "bomb is {} bytes", bytes.len());
    let err = refused(&bytes, small_limits());
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(err.to_string().contains("app/values.yaml"), "{err}");

    // Many files under the per-file limit still hit the total.
    let chunk: &'static [u8] = Box::leak(vec![b'a'; 15 * 1024].into_boxed_slice());
    let names: Vec<String> = (0..6).map(|i| format!("app/templates/f{i}.yaml")).collect();
    let entries = names
        .iter()
        .map(|n| Entry::File(Box::leak(n.clone().into_boxed_str()), chunk))
        .collect();
    let err = refused(&minimal(entries), small_limits());
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(err.to_string().contains("bytes decompressed"), "{err}");

    // The compressed archive itself is bounded too.
    let mut limits = small_limits();
    limits.max_archive_size = 1024;
    let err = refused(&bytes, limits);
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(
        err.to_string()
            .contains("archive is larger than 1024 bytes"),
        "{err}"
    );
}

#[test]
fn too_many_files_are_refused() {
    let names: Vec<String> = (0..25)
        .map(|i| format!("app/templates/f{i}.yaml"))
        .collect();
    let entries = names
        .iter()
        .map(|n| Entry::File(Box::leak(n.clone().into_boxed_str()), b"x" as &[u8]))
        .collect();
    let err = refused(&minimal(entries), small_limits());
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(err.to_string().contains("more than 20 files"), "{err}");
}

#[test]
fn subcharts_share_the_limits_and_depth() {
    // A packed subchart holding a bomb is caught although the outer file is small.
    let zeros: &'static [u8] = Box::leak(vec![0u8; 1024 * 1024].into_boxed_slice());
    let inner = tgz(&[
        Entry::File(
            "db/Chart.yaml",
            b"apiVersion: v2\nname: db\nversion: 0.1.0\n",
        ),
        Entry::File("db/values.yaml", zeros),
    ]);
    let inner: &'static [u8] = Box::leak(inner.into_boxed_slice());
    let err = refused(
        &minimal(vec![Entry::File("app/charts/db.tgz", inner)]),
        small_limits(),
    );
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(
        err.to_string().contains("charts/db.tgz:db/values.yaml"),
        "{err}"
    );

    // Nesting deeper than max_depth.
    let mut level = tgz(&[Entry::File(
        "c/Chart.yaml",
        b"apiVersion: v2\nname: c\nversion: 1.0.0\n",
    )]);
    for name in ["b", "a"] {
        let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n");
        let cy: &'static str = Box::leak(format!("{name}/Chart.yaml").into_boxed_str());
        let sub: &'static str = Box::leak(format!("{name}/charts/x.tgz").into_boxed_str());
        let cy_body: &'static [u8] = Box::leak(chart_yaml.into_bytes().into_boxed_slice());
        let inner: &'static [u8] = Box::leak(level.into_boxed_slice());
        level = tgz(&[Entry::File(cy, cy_body), Entry::File(sub, inner)]);
    }
    let inner: &'static [u8] = Box::leak(level.into_boxed_slice());
    let err = refused(
        &minimal(vec![Entry::File("app/charts/a.tgz", inner)]),
        small_limits(),
    );
    assert_eq!(err.reason(), "ChartTooLarge");
    assert!(err.to_string().contains("nested deeper than 2"), "{err}");
}

#[test]
fn invalid_charts_name_the_file() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            tgz(&[Entry::File("app/values.yaml", b"a: 1\n")]),
            "Chart.yaml",
        ),
        (
            tgz(&[Entry::File("app/Chart.yaml", b"name: [\n")]),
            "Chart.yaml",
        ),
        (
            tgz(&[Entry::File(
                "app/Chart.yaml",
                b"apiVersion: v9\nname: a\nversion: 1.0.0\n",
            )]),
            "Chart.yaml",
        ),
        (
            tgz(&[Entry::File(
                "app/Chart.yaml",
                b"apiVersion: v2\nname: a\nversion: latest\n",
            )]),
            "Chart.yaml",
        ),
        (
            minimal(vec![Entry::File("app/values.yaml", b"- a\n- b\n")]),
            "values.yaml",
        ),
        (
            minimal(vec![Entry::File("app/values.yaml", b"a: [\n")]),
            "values.yaml",
        ),
        (
            minimal(vec![Entry::File("app/values.schema.json", b"{nope")]),
            "values.schema.json",
        ),
        (
            minimal(vec![Entry::File("app/charts/sub/values.yaml", b"a: 1\n")]),
            "charts/sub/Chart.yaml",
        ),
        (b"this is not gzip".to_vec(), "<archive>"),
    ];
    for (bytes, file) in cases {
        let err = refused(&bytes, Limits::default());
        assert_eq!(err.reason(), "InvalidChart", "{err}");
        match &err {
            Error::InvalidChart { file: f, .. } => assert_eq!(f, file, "{err}"),
            other => panic!("unexpected {other}"),
        }
    }
}

#[test]
fn gzip_wrapping_of_garbage_is_refused() {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&[7u8; 2048]).unwrap();
    let err = refused(&gz.finish().unwrap(), Limits::default());
    assert_eq!(err.reason(), "InvalidChart", "{err}");
}

#[test]
fn numeric_looking_versions_stay_text() {
    let bytes = tgz(&[Entry::File(
        "app/Chart.yaml",
        b"apiVersion: v2\nname: app\nversion: 1.10\nappVersion: 2.0\n",
    )]);
    let p = Package::from_archive(&bytes).unwrap();
    assert_eq!(p.version(), "1.10");
}

/// Scalars resolve like Helm's YAML reader (YAML 1.1 booleans included): `yes` is `true`.
#[test]
fn values_scalars_resolve_like_helm() {
    let bytes = minimal(vec![Entry::File(
        "app/values.yaml",
        b"quoted: \"\"\nsingle: ''\nempty:\ntilde: ~\nnull_word: null\nyes_word: yes\nnum_str: \"1.0\"\n",
    )]);
    let p = Package::from_archive(&bytes).unwrap();
    assert_eq!(
        p.values,
        json!({"quoted": "", "single": "", "empty": null, "tilde": null, "null_word": null, "yes_word": true, "num_str": "1.0"})
    );
}
