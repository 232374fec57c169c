//! `compositor crd`: the CRD on stdout, one warning per line on stderr, clear failures.

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn chart(dir: &Path, schema: &str) {
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: fireworks-app\nversion: 1.1.5\ndescription: Fireworks.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        "replicas: 3\nimage:\n  tag: null\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.schema.json"), schema).unwrap();
}

fn crd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_compositor"))
        .arg("crd")
        .args(args)
        .output()
        .expect("run compositor")
}

#[test]
fn prints_the_crd_and_one_warning_per_line() {
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        r#"{"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "image": {"type": "object", "properties": {"tag": {"type": ["string", "null"]}}},
            "mode": {"type": ["string", "object"]},
            "name": {"type": "string", "pattern": "^(?!x)"}
        }}"#,
    );
    let out = crd(&[dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("fireworksapps.composition.compositor.dev")
    );
    assert_eq!(crd.spec.versions[0].name, "v1-1-5");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "warning: spec.mode: type: values of types string, object cannot be expressed together; any value is accepted",
            "warning: spec.name: pattern: pattern \"^(?!x)\" is not accepted by the apiserver's regular expressions (look-around is not supported by RE2); dropped",
        ]
    );
}

#[test]
fn overrides_names() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), r#"{"type": "object"}"#);
    let out = crd(&[
        dir.path().to_str().unwrap(),
        "--kind",
        "Show",
        "--group",
        "apps.example.org",
        "--version-name",
        "v1beta1",
        "--apply-defaults",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some("shows.apps.example.org"));
    assert_eq!(crd.spec.versions[0].name, "v1beta1");
}

#[test]
fn a_schema_that_is_not_json_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), "type: object\n");
    let out = crd(&[dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("values.schema.json"), "{stderr}");
}

#[test]
fn invalid_names_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), r#"{"type": "object"}"#);
    let out = crd(&[dir.path().to_str().unwrap(), "--version-name", "V1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("invalid version \"V1\""), "{stderr}");
}

#[test]
fn a_chart_without_a_schema_prints_a_typed_crd_and_its_inference() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), "{}");
    std::fs::remove_file(dir.path().join("values.schema.json")).unwrap();
    let out = crd(&[dir.path().to_str().unwrap(), "--open-key", "image"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value =
        serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let spec = &printed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["replicas"]["type"], "integer");
    assert_eq!(spec["properties"]["image"].get("type"), None);
    assert_eq!(spec.get("x-kubernetes-preserve-unknown-fields"), None);
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "inferred: spec inferred from values.yaml (the chart has no values.schema.json); paths: 1 typed, 1 open",
            "inferred: top level: unknown keys refused (set spec.schema.openKeys to keep a path open)",
            "inferred: 1 integer, from a whole-number default (Helm hands templates every number as a float, but such defaults end in fields like replicas and ports that refuse fractions)",
            "inferred: 1 any value: spec.schema.openKeys",
        ]
    );
    let never = crd(&[dir.path().to_str().unwrap(), "--infer", "Never"]);
    assert!(never.status.success());
    assert!(never.stderr.is_empty());
}
