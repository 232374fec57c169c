use std::path::Path;

use super::calls::knows_server_side;
use super::error::MESSAGE_LIMIT;
use super::*;

#[test]
fn messages_lose_the_prefix_and_stay_short() {
    assert_eq!(shorten("Error: chart not found\n"), "chart not found");
    let long = "é".repeat(MESSAGE_LIMIT);
    let short = shorten(&long);
    assert!(short.len() <= MESSAGE_LIMIT + '…'.len_utf8());
    assert!(short.ends_with('…'));
    let helm_4 =
        "level=WARN msg=\"upgrade failed\" name=r error=\"boom\"\nError: UPGRADE FAILED: boom\n";
    assert_eq!(shorten(helm_4), "UPGRADE FAILED: boom");
    assert_eq!(shorten("level=WARN msg=only\n"), "level=WARN msg=only");
}

#[test]
fn render_failures_are_told_from_other_failures() {
    let failed = |message: &str| Error::Failed {
        verb: "upgrade",
        message: message.into(),
    };
    for rendering in [
        "execution error at (rf/templates/a.yaml:1:3): size is required",
        "parse error at (rf/templates/b.yaml:1): unexpected \"}\" in operand",
        "template: rf/templates/a.yaml:3:4: executing \"rf/templates/a.yaml\" at <x>: nil",
        "YAML parse error on rf/templates/a.yaml: error converting YAML to JSON",
    ] {
        assert!(failed(rendering).is_render_failure(), "{rendering}");
    }
    for writing in [
        "Kubernetes cluster unreachable: connection refused",
        "failed to create resource: configmaps is forbidden",
    ] {
        assert!(!failed(writing).is_render_failure(), "{writing}");
    }
    let records = "query: failed to query with labels: secrets is forbidden: User \"x\" \
                   cannot list resource \"secrets\" in API group \"\" in the namespace \"a\"";
    assert!(failed(records).is_records_forbidden());
    assert!(!failed("failed to create resource: configmaps is forbidden").is_records_forbidden());
}

#[test]
fn refusals_by_admission_and_validation_are_told_from_missing_permissions() {
    let failed = |message: &str| Error::Failed {
        verb: "upgrade",
        message: message.into(),
    };
    for rejected in [
        "configmaps \"a\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
        "admission webhook \"v.example.com\" denied the request: no",
        "Deployment.apps \"a\" is invalid: spec.template.spec.containers: Required value",
        "server-side apply failed for object n/strange /v1, Kind=ConfigMap: failed to create typed patch object (n/strange; /v1, Kind=ConfigMap): .bogus: field not declared in schema",
    ] {
        assert!(failed(rejected).is_rejected(), "{rejected}");
    }
    let unauthorized = "configmaps is forbidden: User \"x\" cannot create resource \"configmaps\"";
    assert!(!failed(unauthorized).is_rejected());
    assert!(failed(unauthorized).is_forbidden());
}

#[test]
fn server_side_is_a_helm_4_flag() {
    assert!(knows_server_side("v4.3.1+gc0d08d0"));
    assert!(knows_server_side("v10.0.0"));
    assert!(!knows_server_side("v3.19.0+g3d8990f\n"));
    assert!(knows_server_side("dev"));
}

#[test]
fn a_missing_release_is_recognised_in_every_form() {
    let failed = |message: &str| Error::Failed {
        verb: "status",
        message: message.into(),
    };
    assert!(failed("release: not found").is_release_not_found());
    assert!(failed("uninstall: Release not loaded: r1: release: not found").is_release_not_found());
    assert!(!failed("chart not found").is_release_not_found());
}

#[test]
fn each_way_go_reports_running_out_of_memory_is_told() {
    for report in [
        "fatal error: out of memory\n\ngoroutine 1 [running]:",
        "fatal error: runtime: out of memory\n\nruntime stack:",
        "fatal error: runtime: cannot allocate memory\n",
    ] {
        assert!(error::ran_out_of_memory(report), "{report}");
    }
    assert!(!error::ran_out_of_memory(
        "Error: values say out of memory\n"
    ));
}

#[test]
fn helm_gives_up_before_the_engine_kills_it() {
    let engine = Engine::with_runner(
        Runner::Process("helm".into()),
        Duration::from_secs(60),
        Arc::default(),
    );
    assert_eq!(engine.helm_timeout(), "54000ms");
}

#[test]
fn a_target_does_not_print_its_kubeconfig() {
    let target = KubeContext::new("token: s3cret", "team-a");
    let printed = format!("{target:?}");
    assert!(
        !printed.contains("s3cret") && printed.contains("team-a"),
        "{printed}"
    );
}

#[test]
fn a_withheld_message_keeps_where_the_render_stopped_and_nothing_it_read() {
    let failed = |message: &str| Error::Failed {
        verb: "upgrade",
        message: message.to_string(),
    };
    let from_tpl = failed(
        r#"UPGRADE FAILED: template: leak/templates/cm.yaml:6:12: executing "leak/templates/cm.yaml" at <tpl .Values.note .>: error calling tpl: error during tpl function execution for "{{ fail (lookup \"v1\" \"Secret\" \"b\" \"db\").data.password }}": template: gotpl:1:3: executing "gotpl" at <fail>: error calling fail: czNjcjN0"#,
    );
    assert!(from_tpl.is_render_failure());
    let withheld = from_tpl.withheld().to_string();
    assert!(!withheld.contains("czNjcjN0"), "{withheld}");
    assert!(
        withheld.contains("at leak/templates/cm.yaml:6:12;"),
        "{withheld}"
    );
    let from_fail =
        failed("INSTALLATION FAILED: execution error at (leak/templates/_helpers.tpl:3:4): s3cr3t");
    let withheld = from_fail.withheld().to_string();
    assert!(!withheld.contains("s3cr3t"), "{withheld}");
    assert!(withheld.contains("at leak/templates/_helpers.tpl:3:4;"));
    let from_apply =
        failed(r#"UPGRADE FAILED: ConfigMap "x" is invalid: data[k]: Invalid value: "s3cr3t""#);
    let withheld = from_apply.withheld().to_string();
    assert!(
        !withheld.contains("s3cr3t") && withheld.contains("stopped;"),
        "{withheld}"
    );
    let timeout = Error::Timeout {
        verb: "upgrade",
        timeout: Duration::from_secs(1),
    };
    assert_eq!(
        timeout.withheld().to_string(),
        "helm upgrade timed out after 1s"
    );
}

/// A stand-in `helm` of `version` that writes each call's arguments, one per line, to `args`
/// and answers an upgrade with a deployed release.
fn recording_helm(dir: &Path, version: &str) -> PathBuf {
    let script = dir.join("helm");
    let args = dir.join("args");
    let release = r#"{"name":"r","namespace":"n","version":1,"info":{"status":"deployed"}}"#;
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then echo {version}; exit 0; fi\n\
             printf '%s\\n' \"$@\" > {args}\necho '{release}'\n",
            args = args.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// The arguments of one `upgrade_install` by a helm of `version` applying server-side or not.
async fn upgrade_arguments(version: &str, server_side: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let binary = recording_helm(dir.path(), version);
    let engine = Engine::locate(Some(binary), Duration::from_secs(10), Arc::default())
        .unwrap()
        .with_server_side(server_side);
    let target = KubeContext::new("apiVersion: v1", "n");
    let options = UpgradeOptions::default();
    let chart = dir.path().join("chart.tgz");
    let values = serde_json::json!({});
    // A script just written may be busy for a moment when another test forks meanwhile.
    for attempt in 1.. {
        let options = options.clone();
        match engine
            .upgrade_install(&target, "r", &chart, &values, options)
            .await
        {
            Err(Error::Spawn { .. }) if attempt < 5 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcome => {
                outcome.expect("upgrade");
                break;
            }
        }
    }
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    args.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn helm_leaves_field_validation_to_the_server_only_when_it_applies_server_side() {
    let skips = |args: &[String]| args.iter().any(|a| a == "--disable-openapi-validation");
    let helm_4 = upgrade_arguments("v4.3.1+gc0d08d0", true).await;
    assert!(skips(&helm_4), "{helm_4:?}");
    assert!(
        helm_4.iter().any(|a| a == "--server-side=true"),
        "{helm_4:?}"
    );
    let client_side = upgrade_arguments("v4.3.1+gc0d08d0", false).await;
    assert!(!skips(&client_side), "{client_side:?}");
    let helm_3 = upgrade_arguments("v3.19.0+g3d8990f", true).await;
    assert!(!skips(&helm_3), "{helm_3:?}");
}
