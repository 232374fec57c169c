use super::*;

#[test]
fn a_composition_may_ask_for_less_correction_never_more() {
    let composition = |drift: Option<&str>| -> DynamicObject {
        let mut object = json!({"apiVersion": "x/v1", "kind": "App", "metadata": {"name": "a"}});
        if let Some(drift) = drift {
            object["metadata"]["annotations"] = json!({DRIFT_ANNOTATION: drift});
        }
        serde_json::from_value(object).unwrap()
    };
    let spec = |mode| DriftSpec {
        mode,
        ..DriftSpec::default()
    };
    let correct = spec(DriftMode::Correct);
    assert_eq!(
        mode(&correct, &composition(None)).unwrap(),
        DriftMode::Correct
    );
    let report = composition(Some("Report"));
    assert_eq!(mode(&correct, &report).unwrap(), DriftMode::Report);
    let ignore = spec(DriftMode::Ignore);
    let asks_more = composition(Some("Correct"));
    assert_eq!(mode(&ignore, &asks_more).unwrap(), DriftMode::Ignore);
    let error = mode(&correct, &composition(Some("Sometimes"))).unwrap_err();
    assert_eq!(error.reason(), "InvalidAnnotation");
}

fn finding(object: &str, path: &str) -> Finding {
    Finding {
        object: object.into(),
        paths: vec![path.into()],
        managers: ["intruder".to_string()].into(),
    }
}

#[test]
fn one_line_per_object_and_restored_ones_stay_until_it_drifts_again() {
    let corrected = Settled {
        checked: ["ConfigMap t/a".to_string()].into(),
        corrected: vec![finding("ConfigMap t/a", "/data/k")],
        reported: Vec::new(),
    };
    let lines = corrected.drifted(&[]);
    assert_eq!(
        lines,
        ["ConfigMap t/a changed at /data/k by intruder; restored"]
    );

    let clean = Settled {
        checked: ["ConfigMap t/a".to_string(), "Service t/b".to_string()].into(),
        ..Settled::default()
    };
    let before = [lines[0].clone(), "Service t/b deleted".to_string()];
    assert_eq!(
        clean.drifted(&before),
        [lines[0].clone()],
        "found as rendered"
    );

    let reported = Settled {
        checked: ["ConfigMap t/a".to_string()].into(),
        reported: vec![finding("ConfigMap t/a", "/data/j")],
        corrected: Vec::new(),
    };
    assert_eq!(
        reported.drifted(&lines),
        ["ConfigMap t/a changed at /data/j by intruder"]
    );
}
