//! Who a render makes run or grants to: a release gives its roles only to ServiceAccounts of
//! the namespaces it may write into, and neither runs a workload as, nor binds a role to, one
//! of compositor's own identities. A pod running as the release identity would hold, with its
//! token, what Helm may do for every composition of the namespace without the gate in between;
//! one running as a controller would hold the controller's.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::helm::RenderedDocument;
use crate::rbac::ReleasePlace;
use crate::rbac::power::RELEASE_IDENTITY_PREFIX;
use crate::rbac::subjects::{Subject, SubjectBinding, refused_subject};

/// The accounts a release may name.
pub(super) struct Own<'a> {
    /// The namespaces the release may write into.
    allowed: &'a BTreeSet<String>,
    /// The namespaces where controllers run (the definition's, the operator's).
    reserved: &'a [&'a str],
}

impl<'a> Own<'a> {
    pub(super) fn new(allowed: &'a BTreeSet<String>, reserved: &'a [&'a str]) -> Self {
        Own { allowed, reserved }
    }

    /// Whether ServiceAccount `namespace/name` is compositor's: a release identity
    /// (`compositor.…`) anywhere, or a controller (`…-controller`) where controllers run.
    fn is_compositors(&self, namespace: &str, name: &str) -> bool {
        name.starts_with(RELEASE_IDENTITY_PREFIX)
            || (name.ends_with("-controller") && self.reserved.contains(&namespace))
    }

    /// The subjects the bindings among `documents` would grant to that are not ServiceAccounts
    /// of the allowed namespaces, or are compositor's own, one binding of one subject each: a
    /// release may give its roles to its own workloads; to a user, a group or another
    /// namespace's accounts only as an administrator approved ([`admitted`]), and never to the
    /// identities compositor runs as. A ServiceAccount subject without a namespace is the
    /// binding's (or, at cluster scope, refused, as Kubernetes refuses it).
    pub(super) fn foreign_subjects(
        &self,
        documents: &[RenderedDocument],
        release_namespace: &str,
    ) -> Vec<SubjectBinding> {
        let bindings = documents.iter().filter(|d| {
            d.object
                .api_version
                .starts_with("rbac.authorization.k8s.io/")
                && matches!(d.object.kind.as_str(), "RoleBinding" | "ClusterRoleBinding")
        });
        let mut foreign = Vec::new();
        for binding in bindings {
            let own_namespace = match binding.object.kind.as_str() {
                "RoleBinding" => Some(
                    binding
                        .object
                        .namespace
                        .as_deref()
                        .unwrap_or(release_namespace),
                ),
                _ => None,
            };
            let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
            for subject in binding.body["subjects"].as_array().into_iter().flatten() {
                let kind = subject["kind"].as_str().unwrap_or_default();
                let name = subject["name"].as_str().unwrap_or_default();
                let namespace = subject["namespace"].as_str().or(own_namespace);
                let accepted = kind == "ServiceAccount"
                    && namespace
                        .is_some_and(|n| self.allowed.contains(n) && !self.is_compositors(n, name));
                if !accepted {
                    foreign.push(SubjectBinding {
                        kind: binding.object.kind.clone(),
                        namespace: own_namespace.map(str::to_string),
                        name: binding.object.name.clone(),
                        role_kind: text(&binding.body["roleRef"]["kind"]),
                        role: text(&binding.body["roleRef"]["name"]),
                        subject: Subject {
                            kind: kind.to_string(),
                            namespace: (kind == "ServiceAccount")
                                .then(|| namespace.map(str::to_string))
                                .flatten(),
                            name: name.to_string(),
                        },
                    });
                }
            }
        }
        foreign
    }

    /// Whether no line can admit `binding`: its subject is one of Kubernetes' own that no chart
    /// may be given ([`refused_subject`]), or one of compositor's identities.
    pub(super) fn never_admitted(&self, binding: &SubjectBinding) -> bool {
        let subject = &binding.subject;
        refused_subject(subject, self.reserved)
            || subject
                .namespace
                .as_deref()
                .is_some_and(|n| self.is_compositors(n, &subject.name))
    }

    /// The workloads and hooks among `documents` whose pods would run as one of compositor's
    /// identities, as `<Kind> <namespace/name> runs as <namespace/account>`. Pods are found
    /// where every workload kind keeps them (`spec` of a Pod, `spec.template.spec`,
    /// `spec.jobTemplate.spec.template.spec`), so a custom resource shaped like a Deployment is
    /// looked at too.
    pub(super) fn borrowed_identities(
        &self,
        documents: &[RenderedDocument],
        release_namespace: &str,
    ) -> Vec<String> {
        let mut borrowed = Vec::new();
        for document in documents {
            let namespace = document
                .object
                .namespace
                .as_deref()
                .unwrap_or(release_namespace);
            for pod in pod_specs(&document.object.kind, &document.body) {
                let account = pod["serviceAccountName"]
                    .as_str()
                    .or(pod["serviceAccount"].as_str())
                    .unwrap_or("default");
                if self.is_compositors(namespace, account) {
                    borrowed.push(format!(
                        "{} {namespace}/{} runs as {namespace}/{account}",
                        document.object.kind, document.object.name
                    ));
                }
            }
        }
        borrowed
    }
}

/// Of `foreign` bindings (as a release at `place` renders them), those not admitted, one line
/// each saying why: `never` says which no line can admit; `approved` are the definition's
/// approved bindings, as their grant lines and patterns. A binding is admitted only when one of
/// them, filled for this release, is exactly it: kind, name, role and subject, so values can
/// neither rename what an approval admits nor give the approved role to anyone else.
pub(super) fn refused_bindings(
    foreign: &[SubjectBinding],
    never: impl Fn(&SubjectBinding) -> bool,
    approved: &[(String, SubjectBinding)],
    place: &ReleasePlace,
) -> Vec<String> {
    let mut refused = Vec::new();
    for binding in foreign {
        if never(binding) {
            refused.push(format!(
                "{binding} (no approval can admit {})",
                binding.subject
            ));
            continue;
        }
        if approved.iter().any(|(_, a)| a.fill(place) == *binding) {
            continue;
        }
        let same_role = approved.iter().filter(|(_, a)| {
            let filled = a.fill(place);
            filled.to(&binding.subject) == *binding
        });
        let lines: Vec<&str> = same_role.map(|(line, _)| line.as_str()).collect();
        refused.push(match lines.is_empty() {
            true => format!(
                "{binding} (no approved line admits it: a binding to anyone but a \
                 ServiceAccount of the composition's namespaces is allowed only as the chart \
                 binds it with its default values, once an administrator approves its line)"
            ),
            false => format!(
                "{binding} (no line can admit it: only the subject the chart binds with its \
                 default values is, as approved: {})",
                lines.join("; ")
            ),
        });
    }
    refused
}

/// The pod specs an object of `kind` holds.
fn pod_specs<'v>(kind: &str, body: &'v Value) -> Vec<&'v Value> {
    let spec = &body["spec"];
    let mut pods = vec![
        &spec["template"]["spec"],
        &spec["jobTemplate"]["spec"]["template"]["spec"],
    ];
    if kind == "Pod" {
        pods.push(spec);
    }
    pods.into_iter().filter(|pod| pod.is_object()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVED: [&str; 2] = ["platform", "compositor-system"];

    #[test]
    fn bindings_may_name_only_service_accounts_of_the_compositions_namespaces() {
        let manifest = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: web-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: web-reader}
subjects:
- {kind: ServiceAccount, name: web, namespace: team-a}
- {kind: User, name: mallory}
- {kind: ServiceAccount, name: web, namespace: team-b}
- {kind: ServiceAccount, name: compositor.platform.webs-v1, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: web-leases}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: web-leases}
subjects:
- {kind: ServiceAccount, name: web}
- {kind: Group, name: system:authenticated}
- {kind: ServiceAccount, name: sealed-secrets-controller}
"#;
        let documents = crate::helm::parse_documents(manifest).unwrap();
        let allowed: BTreeSet<String> = ["team-a".to_string()].into();
        let own = Own::new(&allowed, &RESERVED);
        let foreign = own.foreign_subjects(&documents, "team-a");
        let lines: Vec<String> = foreign.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "ClusterRoleBinding web-reader binds ClusterRole web-reader to User mallory",
                "ClusterRoleBinding web-reader binds ClusterRole web-reader to ServiceAccount \
                 team-b/web",
                "ClusterRoleBinding web-reader binds ClusterRole web-reader to ServiceAccount \
                 team-a/compositor.platform.webs-v1",
                "RoleBinding team-a/web-leases binds Role web-leases to Group \
                 system:authenticated",
            ]
        );
        let never: Vec<bool> = foreign.iter().map(|b| own.never_admitted(b)).collect();
        assert_eq!(never, [false, false, true, false]);
    }

    #[test]
    fn only_the_approved_binding_of_this_release_is_admitted_and_a_refusal_says_why() {
        let manifest = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sealed-service-proxier}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sealed-service-proxier}
subjects:
- {kind: Group, name: system:authenticated}
- {kind: Group, name: developers}
- {kind: Group, name: system:masters}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: other-service-proxier}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: other-service-proxier}
subjects:
- {kind: Group, name: system:authenticated}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sealed-service-proxier-2}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sealed-service-proxier}
subjects:
- {kind: Group, name: system:authenticated}
"#;
        let documents = crate::helm::parse_documents(manifest).unwrap();
        let allowed: BTreeSet<String> = ["team-a".to_string()].into();
        let own = Own::new(&allowed, &RESERVED);
        let foreign = own.foreign_subjects(&documents, "team-a");
        let annotation = crate::rbac::approval::bindings_annotation(
            "platform/sealed",
            &[SubjectBinding::parse(
                "RoleBinding {namespace}/{release}-service-proxier binds Role \
                 {release}-service-proxier to Group system:authenticated",
            )
            .unwrap()],
            &[],
        );
        let approved = crate::rbac::subjects::approved_bindings(&annotation);
        let place = ReleasePlace {
            release: "sealed".into(),
            namespace: "team-a".into(),
        };
        let refused = refused_bindings(&foreign, |b| own.never_admitted(b), &approved, &place);
        let line = "platform/sealed namespaced: RoleBinding {namespace}/{release}-service-proxier \
                    binds Role {release}-service-proxier to Group system:authenticated";
        assert_eq!(refused.len(), 4, "{refused:#?}");
        assert_eq!(
            refused[0],
            format!(
                "RoleBinding team-a/sealed-service-proxier binds Role sealed-service-proxier to \
                 Group developers (no line can admit it: only the subject the chart binds with \
                 its default values is, as approved: {line})"
            )
        );
        assert_eq!(
            refused[1],
            "RoleBinding team-a/sealed-service-proxier binds Role sealed-service-proxier to \
             Group system:masters (no approval can admit Group system:masters)"
        );
        for (refusal, name) in refused[2..].iter().zip(["other", "sealed"]) {
            assert!(
                refusal.starts_with(&format!("RoleBinding team-a/{name}-service-proxier")),
                "{refusal}"
            );
            assert!(refusal.contains("(no approved line admits it"), "{refusal}");
        }
    }

    #[test]
    fn no_workload_or_hook_runs_as_a_release_identity_or_a_controller() {
        let manifest = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {template: {spec: {serviceAccountName: compositor.platform.webs-v1, containers: []}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: platform}
spec: {jobTemplate: {spec: {template: {spec: {serviceAccount: webs-v1-controller}}}}}
---
apiVersion: v1
kind: Pod
metadata: {name: hook, annotations: {helm.sh/hook: pre-install}}
spec: {serviceAccountName: compositor.other.apps-v2}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: own}
spec: {template: {spec: {serviceAccountName: sealed-secrets-controller}}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: shaped-like-a-deployment}
spec: {template: {spec: {serviceAccountName: compositor.platform.webs-v1}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: default-account}
spec: {template: {spec: {containers: []}}}
"#;
        let documents = crate::helm::parse_documents(manifest).unwrap();
        let allowed: BTreeSet<String> = ["team-a".to_string(), "platform".to_string()].into();
        assert_eq!(
            Own::new(&allowed, &RESERVED).borrowed_identities(&documents, "team-a"),
            [
                "Deployment team-a/web runs as team-a/compositor.platform.webs-v1",
                "CronJob platform/nightly runs as platform/webs-v1-controller",
                "Pod team-a/hook runs as team-a/compositor.other.apps-v2",
                "Rollout team-a/shaped-like-a-deployment runs as \
                 team-a/compositor.platform.webs-v1",
            ]
        );
    }
}
