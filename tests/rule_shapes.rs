//! Every rule shape of `src/rbac/rule_shapes.json` put to the installed admission policy as
//! the operator's own token: the policy's CEL admits a role without approval exactly when
//! `compositor::rbac::power` says none of its rules needs one, row by row. (The unit test
//! beside the table checks the Rust side against the decision each row writes down.)

mod support;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::Api;
use serde_json::json;

use compositor::rbac::power::{Scope, needs_approval};
use support::installed::{dry_run_create, install, operator_client, wait_for_policy};

/// One row of the table: the rule, the role it stands in, and where.
#[derive(serde::Deserialize)]
struct Shape {
    what: String,
    scope: String,
    rule: PolicyRule,
    #[serde(default)]
    role: Vec<PolicyRule>,
}

#[tokio::test]
async fn the_policy_and_the_rust_decision_agree_on_every_rule_shape() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "rule-shapes").await;
    install(&support::Helm::new(), &namespace, &["tenant.enabled=false"]);
    wait_for_policy(&namespace).await;
    let as_operator = operator_client(&namespace).await;
    let shapes: Vec<Shape> =
        serde_json::from_str(include_str!("../src/rbac/rule_shapes.json")).expect("table");
    let name = format!("compositor:{namespace}:shapes-v1");
    let owner = format!("{namespace}/shapes");
    let metadata = |place: Option<&str>| {
        json!({
            "name": name,
            "namespace": place,
            "labels": {"app.kubernetes.io/managed-by": "compositor"},
            "annotations": {"compositor.dev/owner": owner},
        })
    };
    let mut disagreements = Vec::new();
    for shape in &shapes {
        let rules = if shape.role.is_empty() {
            vec![shape.rule.clone()]
        } else {
            shape.role.clone()
        };
        // "team" stands for a namespace of a release; any other namespaced scope is itself.
        let role_namespace = match shape.scope.as_str() {
            "cluster" => None,
            "team" => Some(namespace.as_str()),
            other => Some(other),
        };
        let scope = role_namespace.map_or(Scope::Cluster, Scope::Namespace);
        let rust = rules.iter().any(|rule| needs_approval(rule, &rules, scope));
        let refusal = match role_namespace {
            None => {
                let role: ClusterRole =
                    serde_json::from_value(json!({"metadata": metadata(None), "rules": rules}))
                        .expect("ClusterRole");
                dry_run_create(&Api::all(as_operator.clone()), &role).await
            }
            Some(place) => {
                let role: Role = serde_json::from_value(
                    json!({"metadata": metadata(Some(place)), "rules": rules}),
                )
                .expect("Role");
                dry_run_create(&Api::namespaced(as_operator.clone(), place), &role).await
            }
        };
        if let Err(status) = &refusal {
            assert!(
                status.message.contains("ValidatingAdmissionPolicy"),
                "{}: refused by the admission policy, not by RBAC: {status:?}",
                shape.what
            );
        }
        if refusal.is_err() != rust {
            disagreements.push(format!(
                "{} ({}): Rust says approval {}, the policy {}",
                shape.what,
                shape.scope,
                if rust { "needed" } else { "not needed" },
                match &refusal {
                    Err(status) => format!("refused: {}", status.message),
                    Ok(()) => "admitted it".to_string(),
                },
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} rule shapes disagree:\n{}",
        disagreements.len(),
        shapes.len(),
        disagreements.join("\n")
    );
}
