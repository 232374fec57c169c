use super::*;
use crate::api::CompositionDefinitionSpec;
use crate::rbac::{NAMESPACE, RELEASE, ReleasePlace, ResolvedKind};
use k8s_openapi::api::rbac::v1::PolicyRule;
use std::collections::BTreeSet;

fn definition(namespace: &str, name: &str) -> CompositionDefinition {
    let mut definition = CompositionDefinition::new(
        name,
        serde_json::from_value::<CompositionDefinitionSpec>(json!({"chart": {"url": "oci://r/c"}}))
            .expect("spec"),
    );
    definition.metadata.namespace = Some(namespace.into());
    definition.metadata.uid = Some("0000-1111".into());
    definition
}

fn kind(group: &str, plural: &str, namespaced: bool) -> ResolvedKind {
    ResolvedKind {
        group: group.into(),
        plural: plural.into(),
        namespaced,
    }
}

fn place(release: &str, namespace: &str) -> ReleasePlace {
    ReleasePlace {
        release: release.into(),
        namespace: namespace.into(),
    }
}

/// A chart writing ConfigMaps, Deployments and Services in the release namespace and one
/// ClusterRole named after the release, installed twice.
fn controller() -> Controller {
    let mut footprint = Footprint::default();
    footprint.namespaces.insert(
        NAMESPACE.into(),
        NamespaceUse {
            kinds: [
                kind("", "configmaps", true),
                kind("apps", "deployments", true),
                kind("", "services", true),
            ]
            .into(),
            ..NamespaceUse::default()
        },
    );
    let clusterroles = kind("rbac.authorization.k8s.io", "clusterroles", false);
    footprint
        .cluster
        .objects
        .insert(clusterroles, [format!("{RELEASE}-reader")].into());
    Controller {
        resource: GeneratedResource {
            group: "composition.compositor.dev".into(),
            version: "v1-1-5".into(),
            plural: "fireworksapps".into(),
        },
        chart_version: "1.1.5".into(),
        image: "compositor:test".into(),
        allow_cross_namespace_refs: false,
        dependents_timeout_seconds: crate::api::DEFAULT_DEPENDENTS_TIMEOUT,
        permissions: Permissions {
            footprint,
            releases: vec![place("acme", "team-b"), place("beta", "team-a")],
            listed_namespaces: BTreeSet::new(),
            owns_namespaces: false,
            asked_namespaces: BTreeSet::new(),
            secrets: [("demo".to_string(), "repo-password".to_string())].into(),
            config_maps: [("demo".to_string(), "repo-ca".to_string())].into(),
            clusters_namespace: None,
            cluster_secrets: BTreeSet::new(),
            watch_everywhere: false,
            operator: None,
            dependencies: BTreeSet::new(),
            values_config_maps: BTreeSet::new(),
        },
    }
}

#[test]
fn names_carry_plural_version_and_namespace() {
    let definition = definition("demo", "fireworksapp");
    let bundle = controller().bundle(&definition).expect("bundle");
    assert_eq!(
        bundle.deployment.metadata.name.as_deref(),
        Some("fireworksapps-v1-1-5-controller")
    );
    assert_eq!(
        bundle.service_account.metadata.name.as_deref(),
        Some("fireworksapps-v1-1-5-controller")
    );
    assert_eq!(
        bundle.cluster_role.metadata.name.as_deref(),
        Some("compositor:demo:fireworksapps-v1-1-5")
    );
    let namespaces: Vec<_> = bundle
        .namespace_roles
        .iter()
        .map(|(role, binding)| {
            assert_eq!(role.metadata.name, binding.metadata.name);
            assert_eq!(binding.role_ref.kind, "Role");
            binding.metadata.namespace.clone().unwrap()
        })
        .collect();
    assert_eq!(namespaces, ["team-a", "team-b"]);
}

#[test]
fn deployment_runs_the_controller_of_its_version() {
    let bundle = controller()
        .bundle(&definition("demo", "fireworksapp"))
        .expect("bundle");
    let pod = bundle.deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("fireworksapps-v1-1-5-controller")
    );
    let container = &pod.containers[0];
    assert_eq!(
        container.args.clone().unwrap(),
        [
            "controller",
            "--group",
            "composition.compositor.dev",
            "--version",
            "v1-1-5",
            "--resource",
            "fireworksapps",
            "--definition",
            "demo/fireworksapp"
        ]
    );
    assert!(container.readiness_probe.is_some() && container.liveness_probe.is_some());
    assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
}

#[test]
fn the_definition_role_grants_the_controllers_own_lease_only() {
    let bundle = controller()
        .bundle(&definition("demo", "fireworksapp"))
        .expect("bundle");
    let rules = serde_json::to_value(bundle.definition_role.rules).unwrap();
    let leases: Vec<&serde_json::Value> = rules
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| rule["resources"] == json!(["leases"]))
        .collect();
    // The name `compositor controller --leader-elect` uses by default.
    assert_eq!(
        leases,
        [
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": ["fireworksapps-v1-1-5-controller"],
                    "verbs": ["get", "list", "watch", "patch"]}),
        ]
    );
}

#[test]
fn namespaced_objects_are_owned_by_the_definition() {
    let bundle = controller()
        .bundle(&definition("demo", "fireworksapp"))
        .expect("bundle");
    let owner = &bundle
        .deployment
        .metadata
        .owner_references
        .as_ref()
        .expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("CompositionDefinition", "0000-1111")
    );
    assert!(bundle.cluster_role.metadata.owner_references.is_none());
}

#[test]
fn rules_are_exactly_what_helm_needs() {
    let controller = controller();
    let own = controller
        .permissions
        .controller_cluster_rules(&controller.resource, "chart");
    assert_eq!(
        serde_json::to_value(own).unwrap(),
        json!([
            {"apiGroups": ["composition.compositor.dev"],
             "resources": ["fireworksapps", "fireworksapps/status", "fireworksapps/finalizers"],
             "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["chart"], "verbs": ["get"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ])
    );
    let releases = controller.permissions.release_cluster_rules();
    assert_eq!(
        serde_json::to_value(releases).unwrap(),
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-reader", "beta-reader"],
             "verbs": ["get", "list", "watch", "update", "patch", "delete"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-reader", "beta-reader"], "verbs": ["escalate"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-reader", "beta-reader"], "verbs": ["bind"]},
        ])
    );
    let namespaced =
        serde_json::to_value(controller.permissions.namespace_rules("identity")).unwrap();
    let helm = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let release = json!([
        {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": helm},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": helm},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": helm},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": ["identity"], "verbs": ["impersonate"]},
    ]);
    assert_eq!(namespaced, json!({"team-a": release, "team-b": release}));
    let definition = serde_json::to_value(
        controller
            .permissions
            .definition_rules("fireworksapp", "demo"),
    )
    .unwrap();
    assert_eq!(
        definition,
        json!([
            {"apiGroups": ["compositor.dev"], "resources": ["compositiondefinitions"], "resourceNames": ["fireworksapp"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["repo-password"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["repo-ca"], "verbs": ["get"]},
        ])
    );
}

#[test]
fn watching_everywhere_lists_and_watches_the_charts_kinds_but_never_secrets() {
    let mut controller = controller();
    let release_namespace = controller
        .permissions
        .footprint
        .namespaces
        .get_mut(NAMESPACE);
    let kinds = &mut release_namespace.unwrap().kinds;
    kinds.insert(kind("", "secrets", true));
    let own = |c: &Controller| c.permissions.controller_cluster_rules(&c.resource, "chart");
    let without = own(&controller);
    controller.permissions.watch_everywhere = true;
    let with = own(&controller);
    assert_eq!(
        serde_json::to_value(&with[without.len()..]).unwrap(),
        json!([
            {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        ])
    );
    assert_eq!(with[..without.len()], without[..]);
}

#[test]
fn namespaces_by_name_only_when_compositor_creates_them() {
    let mut controller = controller();
    let has_namespaces = |c: &Controller| {
        c.permissions
            .controller_cluster_rules(&c.resource, "chart")
            .iter()
            .any(|r| {
                r.resources
                    .as_ref()
                    .unwrap()
                    .contains(&"namespaces".to_string())
            })
    };
    assert!(!has_namespaces(&controller));
    controller.permissions.owns_namespaces = true;
    assert!(has_namespaces(&controller));
    // A namespace asked for but not made for its composition may be read, never deleted.
    controller.permissions.asked_namespaces = ["kube-system".to_string()].into();
    let rules = controller
        .permissions
        .controller_cluster_rules(&controller.resource, "chart");
    let names = |verb: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.resources.as_deref() == Some(&["namespaces".to_string()][..]))
            .filter(|r| r.verbs.iter().any(|v| v == verb))
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(names("delete"), ["team-a", "team-b"]);
    assert_eq!(names("get"), ["kube-system", "team-a", "team-b"]);
}

#[test]
fn a_version_without_compositions_gets_nothing_of_its_chart() {
    let mut controller = controller();
    controller.permissions.releases.clear();
    controller.permissions.listed_namespaces = ["elsewhere".to_string()].into();
    let cluster = controller
        .permissions
        .controller_cluster_rules(&controller.resource, "chart");
    assert_eq!(
        cluster.len(),
        3,
        "its own resource, the chart's reference and events: {cluster:?}"
    );
    assert!(controller.permissions.release_cluster_rules().is_empty());
    assert!(
        controller
            .permissions
            .namespace_rules("identity")
            .is_empty()
    );
}

#[test]
fn objects_are_typed_and_ordered_deployment_last() {
    let objects = controller()
        .bundle(&definition("demo", "fireworksapp"))
        .unwrap()
        .objects()
        .unwrap();
    let kinds: Vec<_> = objects
        .iter()
        .map(|o| o.types.as_ref().unwrap().kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ServiceAccount",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
}

#[test]
fn each_release_namespace_has_an_identity_bound_only_where_its_releases_write() {
    let bundle = controller()
        .bundle(&definition("demo", "fireworksapp"))
        .unwrap();
    let identity = "compositor.demo.fireworksapps-v1-1-5";
    let identities: Vec<(String, String)> = bundle
        .release_identities
        .iter()
        .map(|sa| {
            (
                sa.metadata.namespace.clone().unwrap(),
                sa.metadata.name.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        identities,
        [
            ("team-a".to_string(), identity.to_string()),
            ("team-b".to_string(), identity.to_string())
        ]
    );
    for (role, binding) in &bundle.namespace_roles {
        let namespace = role.metadata.namespace.clone().unwrap();
        let subjects: Vec<String> = binding
            .subjects
            .iter()
            .flatten()
            .map(|s| format!("{}/{}", s.namespace.clone().unwrap(), s.name))
            .collect();
        assert_eq!(
            subjects,
            [
                "demo/fireworksapps-v1-1-5-controller".to_string(),
                format!("{namespace}/{identity}")
            ],
            "only the identity of {namespace} is bound in {namespace}"
        );
    }
    let cluster_subjects = bundle.release_cluster_role_binding.subjects.unwrap();
    assert_eq!(
        cluster_subjects.len(),
        3,
        "the controller and both identities"
    );
    assert!(bundle.cluster_role_binding.subjects.unwrap().len() == 1);
}

#[test]
fn long_definition_labels_stay_valid_and_unique() {
    let short = definition_label(&definition("demo", "fireworksapp"));
    assert_eq!(short, "demo.fireworksapp");
    let a = definition_label(&definition("demo", &"a".repeat(80)));
    let b = definition_label(&definition("demo", &format!("{}b", "a".repeat(79))));
    assert!(a.len() <= 63 && b.len() <= 63);
    assert_ne!(a, b);
}

#[test]
fn references_in_other_namespaces_are_read_there_by_name_and_the_controller_is_told() {
    let mut controller = controller();
    assert!(!deployment_args(&controller).contains(&"--allow-cross-namespace-refs".to_string()));
    controller.allow_cross_namespace_refs = true;
    controller
        .permissions
        .secrets
        .insert(("shared".into(), "registry".into()));
    let get = |resource: &str, name: &str| json!({"apiGroups": [""], "resources": [resource], "resourceNames": [name], "verbs": ["get"]});
    let namespaced = controller.permissions.controller_namespace_rules("demo");
    let namespaced = serde_json::to_value(namespaced).unwrap();
    let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]});
    assert_eq!(
        namespaced,
        json!({"shared": [get("secrets", "registry")], "team-a": [pods], "team-b": [pods]}),
        "the chart's Deployment runs Pods in each release namespace, which the controller watches"
    );
    controller.permissions.footprint.namespaces.insert(
        "kube-system".into(),
        NamespaceUse {
            kinds: [kind("coordination.k8s.io", "leases", true)].into(),
            ..NamespaceUse::default()
        },
    );
    let namespaced = controller.permissions.controller_namespace_rules("demo");
    assert!(
        !namespaced.contains_key("kube-system"),
        "no Pods are read where the chart writes no workload: {namespaced:?}"
    );
    let own = serde_json::to_value(
        controller
            .permissions
            .definition_rules("fireworksapp", "demo"),
    )
    .unwrap();
    assert_eq!(own[1], get("secrets", "repo-password"), "{own}");
    assert!(deployment_args(&controller).contains(&"--allow-cross-namespace-refs".to_string()));
}

fn deployment_args(controller: &Controller) -> Vec<String> {
    let bundle = controller
        .bundle(&definition("demo", "fireworksapp"))
        .unwrap();
    let pod = bundle.deployment.spec.unwrap().template.spec.unwrap();
    pod.containers[0].args.clone().unwrap_or_default()
}

#[test]
fn a_remote_placement_lets_the_controller_read_the_selected_cluster_secrets_by_name() {
    let mut controller = controller();
    assert!(!deployment_args(&controller).contains(&"--clusters-namespace".to_string()));
    controller.permissions.clusters_namespace = Some("compositor-system".into());
    controller.permissions.cluster_secrets = ["edge".to_string(), "prod".to_string()].into();
    let namespaced = controller.permissions.controller_namespace_rules("demo");
    let namespaced = serde_json::to_value(namespaced).unwrap();
    assert_eq!(
        namespaced["compositor-system"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["edge", "prod"],
                "verbs": ["get", "list", "watch"]}])
    );
    let args = deployment_args(&controller);
    let at = args
        .iter()
        .position(|a| a == "--clusters-namespace")
        .expect("flag");
    assert_eq!(args[at + 1], "compositor-system");

    // Nothing selected: no rule at all, since a rule without names would cover every Secret.
    controller.permissions.cluster_secrets.clear();
    let namespaced = controller.permissions.controller_namespace_rules("demo");
    assert!(
        !namespaced.contains_key("compositor-system"),
        "{namespaced:?}"
    );
}

/// A chart whose rules widen needs new grant lines approved; one whose rules shrink lists a
/// subset of what was approved, so nothing new.
#[test]
fn a_widening_footprint_needs_new_grant_lines_and_a_shrinking_one_none() {
    let definition = definition("demo", "fireworksapp");
    let lines = |controller: &Controller| {
        let bundle = controller.bundle(&definition).expect("bundle");
        bundle.grants_needing_approval("demo/fireworksapp")
    };
    assert!(lines(&controller()).is_empty(), "precise rules need none");

    let mut wider = controller();
    let everything: PolicyRule =
        serde_json::from_value(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}))
            .unwrap();
    wider.permissions.footprint.cluster.rules.push(everything);
    wider.permissions.footprint.namespaces.insert(
        "kube-system".into(),
        NamespaceUse {
            kinds: [kind("coordination.k8s.io", "leases", true)].into(),
            ..NamespaceUse::default()
        },
    );
    let widened = lines(&wider);
    assert!(
        widened.contains("demo/fireworksapp cluster-wide: verbs=* apiGroups=* resources=*"),
        "{widened:?}"
    );
    assert!(
        widened.iter().any(
            |line| line.starts_with("demo/fireworksapp in kube-system: ")
                && line.contains("resources=leases")
        ),
        "{widened:?}"
    );

    let mut narrower = wider.clone();
    narrower
        .permissions
        .footprint
        .namespaces
        .remove("kube-system");
    let narrowed = lines(&narrower);
    assert!(narrowed.len() < widened.len() && narrowed.is_subset(&widened));
}

#[test]
fn the_kinds_compositions_wait_for_are_read_and_nothing_more() {
    let mut controller = controller();
    let without = controller
        .permissions
        .controller_cluster_rules(&controller.resource, "chart");
    controller.permissions.dependencies = ["tenants".to_string()].into();
    let with = controller
        .permissions
        .controller_cluster_rules(&controller.resource, "chart");
    let added: Vec<_> = with.iter().filter(|rule| !without.contains(rule)).collect();
    assert_eq!(
        serde_json::to_value(added).unwrap(),
        json!([{"apiGroups": ["composition.compositor.dev"], "resources": ["tenants"],
                "verbs": ["get", "list", "watch"]}])
    );
}

#[test]
fn config_maps_are_read_only_where_compositions_take_values_from_one() {
    let mut controller = controller();
    let without = controller.permissions.namespace_rules("identity");
    controller.permissions.values_config_maps = ["team-a".to_string()].into();
    let with = controller.permissions.namespace_rules("identity");
    let added: Vec<_> = with["team-a"]
        .iter()
        .filter(|rule| !without["team-a"].contains(rule))
        .collect();
    assert_eq!(
        serde_json::to_value(added).unwrap(),
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}])
    );
    assert_eq!(with["team-b"], without["team-b"], "nothing where none does");
}
