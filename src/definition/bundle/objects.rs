//! A version's bundle, object by object, from what they all share: labels and the owner
//! annotation, the controller's ServiceAccount as the subject of every binding, and the name of
//! the release identity.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{
    Bundle, Controller, bundle_annotations, bundle_labels, chart_role_name, owner_reference, rbac,
};
use crate::api::{CHART_REFERENCE_LABEL, CompositionDefinition};
use crate::rbac::subjects::{self, SubjectBinding};

impl Controller {
    /// The bundle of this version for `definition`.
    pub fn bundle(&self, definition: &CompositionDefinition) -> Result<Bundle, serde_json::Error> {
        let shared = Shared::new(self, definition);
        let (cluster_role, cluster_role_binding) = shared.controller_cluster_rbac();
        let (release_cluster_role, release_cluster_role_binding) = shared.release_cluster_rbac();
        let (definition_role, definition_role_binding) = shared.definition_rbac();
        Ok(Bundle {
            service_account: ServiceAccount {
                metadata: shared.owned(),
                ..ServiceAccount::default()
            },
            deployment: self.deployment(definition, shared.owned())?,
            cluster_role,
            cluster_role_binding,
            release_cluster_role,
            release_cluster_role_binding,
            chart_cluster_role: shared.chart_cluster_role(),
            release_identities: shared.release_identities(),
            namespace_roles: shared.namespace_roles(),
            controller_roles: shared.controller_roles(),
            definition_role,
            definition_role_binding,
            subject_bindings: shared.subject_bindings(),
        })
    }
}

/// What every object of one bundle shares.
struct Shared<'a> {
    controller: &'a Controller,
    definition: &'a CompositionDefinition,
    /// The definition's namespace, where the controller runs.
    namespace: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    /// The name of the cluster-scoped objects, and of the roles in other namespaces.
    cluster_name: String,
    /// The release identity's name in every release namespace.
    identity: String,
    /// Where the releases go.
    release_namespaces: BTreeSet<String>,
}

impl<'a> Shared<'a> {
    fn new(controller: &'a Controller, definition: &'a CompositionDefinition) -> Self {
        let permissions = &controller.permissions;
        Shared {
            controller,
            definition,
            namespace: definition.namespace().unwrap_or_default(),
            labels: bundle_labels(definition, &controller.resource.version),
            annotations: bundle_annotations(definition),
            cluster_name: controller.cluster_name(definition),
            identity: controller.release_identity(definition),
            release_namespaces: permissions
                .releases
                .iter()
                .map(|place| place.namespace.clone())
                .collect(),
        }
    }

    /// The metadata of an object named `name` (cluster-scoped unless given a namespace).
    fn meta(&self, name: impl Into<String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            labels: Some(self.labels.clone()),
            annotations: Some(self.annotations.clone()),
            ..ObjectMeta::default()
        }
    }

    /// The metadata of the objects in the definition's namespace that the definition owns (and
    /// Kubernetes deletes with it): the controller's ServiceAccount, Deployment and own Role.
    fn owned(&self) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(self.namespace.clone()),
            owner_references: owner_reference(self.definition).map(|o| vec![o]),
            ..self.meta(self.controller.name())
        }
    }

    /// The controller's ServiceAccount, the subject of every binding.
    fn controller_subjects(&self) -> Vec<Subject> {
        vec![service_account(&self.controller.name(), &self.namespace)]
    }

    fn controller_cluster_rbac(&self) -> (ClusterRole, ClusterRoleBinding) {
        let chart_role = chart_role_name(&self.namespace, &self.controller.resource);
        let permissions = &self.controller.permissions;
        let rules = permissions.controller_cluster_rules(&self.controller.resource, &chart_role);
        self.cluster_pair(&self.cluster_name, rules, self.controller_subjects())
    }

    /// The chart's bindings to subjects that need approval: those no line can admit (see
    /// [`subjects::refused_subject`]) are left to the controller to refuse, and a ServiceAccount
    /// of a namespace the definition lists is the releases' own.
    fn subject_bindings(&self) -> Vec<SubjectBinding> {
        let permissions = &self.controller.permissions;
        let reserved = [self.namespace.as_str()];
        let bindings = permissions.footprint.bindings.iter().filter(|binding| {
            let subject = &binding.subject;
            let listed = subject.kind == "ServiceAccount"
                && subject
                    .namespace
                    .as_ref()
                    .is_some_and(|n| permissions.listed_namespaces.contains(n));
            !listed && !subjects::refused_subject(subject, &reserved)
        });
        bindings.cloned().collect()
    }

    /// What the chart's own ClusterRoles may grant, bound to no one; and, annotated, the
    /// chart's bindings to subjects that need approval, for each release (the bundle is
    /// applied only once they are approved).
    fn chart_cluster_role(&self) -> ClusterRole {
        let mut metadata = self.meta(chart_role_name(&self.namespace, &self.controller.resource));
        metadata
            .labels
            .get_or_insert_default()
            .insert(CHART_REFERENCE_LABEL.to_string(), "true".to_string());
        let definition = super::definition_key(self.definition).to_string();
        let permissions = &self.controller.permissions;
        let bindings = self.subject_bindings();
        if !bindings.is_empty() {
            let releases = &permissions.releases;
            let listed =
                crate::rbac::approval::bindings_annotation(&definition, &bindings, releases);
            let annotations = metadata.annotations.get_or_insert_default();
            annotations.insert(subjects::BINDINGS_ANNOTATION.to_string(), listed);
            if let Some(operator) = &permissions.operator {
                annotations.insert(subjects::OPERATOR_ANNOTATION.to_string(), operator.clone());
            }
        }
        let entries = permissions
            .footprint
            .aggregation_entries(&definition, &permissions.releases);
        if !entries.is_empty() {
            let lines = permissions.footprint.aggregation_lines(&definition);
            let lines: Vec<String> = lines.into_iter().collect();
            let annotations = metadata.annotations.get_or_insert_default();
            annotations.insert(
                crate::rbac::aggregation::AGGREGATIONS_ANNOTATION.to_string(),
                entries.join("\n"),
            );
            annotations.insert(
                crate::rbac::aggregation::AGGREGATION_LINES_ANNOTATION.to_string(),
                lines.join("\n"),
            );
        }
        ClusterRole {
            metadata,
            rules: Some(self.controller.permissions.chart_cluster_rules()),
            ..ClusterRole::default()
        }
    }

    /// What the releases need at cluster scope, bound to the controller and every release
    /// identity.
    fn release_cluster_rbac(&self) -> (ClusterRole, ClusterRoleBinding) {
        let mut subjects = self.controller_subjects();
        subjects.extend(
            self.release_namespaces
                .iter()
                .map(|namespace| service_account(&self.identity, namespace)),
        );
        let rules = self.controller.permissions.release_cluster_rules();
        self.cluster_pair(&format!("{}:releases", self.cluster_name), rules, subjects)
    }

    fn release_identities(&self) -> Vec<ServiceAccount> {
        let identity = |namespace: &String| ServiceAccount {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                ..self.meta(self.identity.clone())
            },
            ..ServiceAccount::default()
        };
        self.release_namespaces.iter().map(identity).collect()
    }

    /// What the chart needs in each namespace it writes into, bound to the controller and to
    /// the release identities that write there; release namespaces last.
    fn namespace_roles(&self) -> Vec<(Role, RoleBinding)> {
        let permissions = &self.controller.permissions;
        let writers = permissions.writers();
        let mut roles: Vec<(Role, RoleBinding)> = permissions
            .namespace_rules(&self.identity)
            .into_iter()
            .map(|(namespace, rules)| {
                let mut subjects = self.controller_subjects();
                let identities = writers.get(&namespace).into_iter().flatten();
                subjects.extend(identities.map(|n| service_account(&self.identity, n)));
                self.role_pair(&self.cluster_name, namespace, rules, subjects)
            })
            .collect();
        roles.sort_by_key(|(role, _)| {
            self.release_namespaces
                .contains(&role.namespace().unwrap_or_default())
        });
        roles
    }

    /// The controller's own rules in namespaces other than the definition's.
    fn controller_roles(&self) -> Vec<(Role, RoleBinding)> {
        let name = format!("{}:controller", self.cluster_name);
        self.controller
            .permissions
            .controller_namespace_rules(&self.namespace)
            .into_iter()
            .map(|(namespace, rules)| {
                self.role_pair(&name, namespace, rules, self.controller_subjects())
            })
            .collect()
    }

    /// The controller's Role in the definition's namespace: the definition, its credential
    /// Secrets, and its leader election Lease.
    fn definition_rbac(&self) -> (Role, RoleBinding) {
        let permissions = &self.controller.permissions;
        let mut rules = permissions.definition_rules(&self.definition.name_any(), &self.namespace);
        rules.extend(rbac::lease_rules(&self.controller.name()));
        let role = Role {
            metadata: self.owned(),
            rules: Some(rules),
        };
        let binding = RoleBinding {
            metadata: self.owned(),
            role_ref: role_ref("Role", &self.controller.name()),
            subjects: Some(self.controller_subjects()),
        };
        (role, binding)
    }

    /// A ClusterRole `name` with `rules` and its binding to `subjects`.
    fn cluster_pair(
        &self,
        name: &str,
        rules: Vec<PolicyRule>,
        subjects: Vec<Subject>,
    ) -> (ClusterRole, ClusterRoleBinding) {
        let role = ClusterRole {
            metadata: self.meta(name),
            rules: Some(rules),
            ..ClusterRole::default()
        };
        let binding = ClusterRoleBinding {
            metadata: self.meta(name),
            role_ref: role_ref("ClusterRole", name),
            subjects: Some(subjects),
        };
        (role, binding)
    }

    /// A Role `name` in `namespace` with `rules` and its binding to `subjects`.
    fn role_pair(
        &self,
        name: &str,
        namespace: String,
        rules: Vec<PolicyRule>,
        subjects: Vec<Subject>,
    ) -> (Role, RoleBinding) {
        let metadata = ObjectMeta {
            namespace: Some(namespace),
            ..self.meta(name)
        };
        let role = Role {
            metadata: metadata.clone(),
            rules: Some(rules),
        };
        let binding = RoleBinding {
            metadata,
            role_ref: role_ref("Role", name),
            subjects: Some(subjects),
        };
        (role, binding)
    }
}

fn service_account(name: &str, namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        api_group: None,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}
