//! The pre-install check: every object Helm would write (templates, hooks and the chart's
//! `crds/`) is put to the real authorizer, in the object's own namespace or at cluster scope,
//! before any Helm call, so that nothing is installed halfway.
//!
//! Each object is asked for `create` (without its name, as Kubernetes authorizes it), `patch`
//! and `delete`. A namespaced object is checked against its namespace's rules: one
//! SelfSubjectRulesReview per namespace, shared by the checks that run at once and kept for
//! [`rules::RULES_TTL`] in [`Kinds`], and evaluated here ([`rules`]). What they allow is
//! allowed; anything else is asked with a SelfSubjectAccessReview, so a denial never rests on
//! the cached rules alone (the authorizer may be more than RBAC), and a review that says its
//! rules are incomplete sends all of its namespace's asks there too. A cluster-scoped object
//! (a CRD, a ClusterRole, a Namespace) is always asked with a SelfSubjectAccessReview: a rules
//! review lists a namespace's rules, RoleBindings' with ClusterRoleBindings', and so cannot say
//! what holds at cluster scope.

mod rules;

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use self::rules::{Reviewed, RulesCache};
use crate::helm::RenderedDocument;
use crate::rbac::{ResolvedKind, TypeRef, crd_kinds};

/// Reviews in flight at once.
const CONCURRENT_REVIEWS: usize = 8;
/// Denials named in one message; the rest are counted.
const NAMED_DENIALS: usize = 5;
/// What each object is asked for.
const VERBS: [&str; 3] = ["create", "patch", "delete"];

/// A write the controller may not make.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Denial {
    /// `create`, `patch` or `delete`.
    pub verb: &'static str,
    /// `resource.group`, e.g. `applications.argoproj.io`.
    pub resource: String,
    /// The object's namespace; `None` at cluster scope.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:?}", self.verb, self.resource, self.name)?;
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace}"),
            None => f.write_str(" (cluster-scoped)"),
        }
    }
}

/// What the controller knows of one cluster as one identity (one value per cluster and
/// kubeconfig revision): the resource of each kind, found by discovery and remembered, since a
/// served kind does not change its resource or scope; the rules of each namespace, reviewed at
/// most once per [`rules::RULES_TTL`]; and, as often, which kinds it may watch everywhere.
#[derive(Default)]
pub struct Kinds {
    known: Mutex<HashMap<TypeRef, ResolvedKind>>,
    rules: RulesCache,
    /// Whether the identity may list and watch a namespaced kind in every namespace, by
    /// resource and group, with when the authorizer said so.
    everywhere: Mutex<HashMap<(String, String), (Instant, bool)>>,
}

impl Kinds {
    /// Whether this identity may list and watch the namespaced `resource` in every namespace,
    /// as the authorizer said at most [`rules::RULES_TTL`] ago; a question it did not answer
    /// is a no.
    pub(in crate::composition) async fn watchable_everywhere(
        &self,
        client: &Client,
        resource: &ApiResource,
    ) -> bool {
        let key = (resource.group.clone(), resource.plural.clone());
        let lock = || self.everywhere.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, may)) = lock().get(&key)
            && at.elapsed() < rules::RULES_TTL
        {
            return *may;
        }
        let kind = ResolvedKind {
            group: key.0.clone(),
            plural: key.1.clone(),
            namespaced: true,
        };
        let asks = ["list", "watch"].map(|verb| Ask {
            kind: kind.clone(),
            namespace: None,
            name: String::new(),
            verb,
        });
        let answers = futures::future::join_all(asks.map(|ask| review(client, ask))).await;
        let may = answers.iter().all(|answer| matches!(answer, Ok((_, true))));
        lock().insert(key, (Instant::now(), may));
        may
    }

    /// The resource and scope of `kind`, by discovery the first time only.
    pub(in crate::composition) async fn resolve(
        &self,
        client: &Client,
        kind: &TypeRef,
    ) -> Result<ResolvedKind, kube::Error> {
        if let Some(found) = self.known.lock().ok().and_then(|k| k.get(kind).cloned()) {
            return Ok(found);
        }
        let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), &kind.kind);
        let (resource, capabilities) = pinned_kind(client, &gvk).await?;
        let found = ResolvedKind {
            group: resource.group,
            plural: resource.plural,
            namespaced: capabilities.scope == Scope::Namespaced,
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(kind.clone(), found.clone());
        }
        Ok(found)
    }
}

/// One write put to the authorizer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ask {
    kind: ResolvedKind,
    /// The object's namespace; `None` at cluster scope.
    namespace: Option<String>,
    name: String,
    verb: &'static str,
}

impl Ask {
    /// The name the authorizer is asked about: none for `create`, which Kubernetes authorizes
    /// before the object exists, nor for an ask about every object (no name).
    fn asked_name(&self) -> Option<&str> {
        let named = self.verb != "create" && !self.name.is_empty();
        named.then_some(self.name.as_str())
    }

    fn denial(self) -> Denial {
        Denial {
            verb: self.verb,
            resource: self.kind.to_string(),
            namespace: self.namespace,
            name: self.name,
        }
    }
}

/// The namespaces `documents` write into when installed into `namespace` that are not among
/// `allowed`: whatever the controller may do there, they are not this composition's.
pub async fn outside(
    client: &Client,
    kinds: &Kinds,
    documents: &[RenderedDocument],
    namespace: &str,
    allowed: &BTreeSet<String>,
) -> Result<BTreeSet<String>, kube::Error> {
    let (asks, _) = asks(client, kinds, documents, namespace).await?;
    Ok(asks
        .into_iter()
        .filter_map(|ask| ask.namespace)
        .filter(|namespace| !allowed.contains(namespace))
        .collect())
}

/// What the controller may not write of `documents` when installed into `namespace`, and the
/// kinds neither the cluster nor the chart's own CRDs serve. Every object is asked for `create`
/// (which Kubernetes cannot limit by name), and `patch` and `delete` by name.
pub async fn denials(
    client: &Client,
    kinds: &Kinds,
    documents: &[RenderedDocument],
    namespace: &str,
) -> Result<(BTreeSet<Denial>, BTreeSet<String>), kube::Error> {
    let (asks, unserved) = asks(client, kinds, documents, namespace).await?;
    let rules = namespace_rules(client, kinds, &asks).await?;
    let unsure: Vec<Ask> = asks
        .into_iter()
        .filter(|ask| !allowed_by(&rules, ask))
        .collect();
    let reviews = unsure.into_iter().map(|ask| review(client, ask));
    let answers: Vec<_> = futures::stream::iter(reviews)
        .buffer_unordered(CONCURRENT_REVIEWS)
        .try_collect()
        .await?;
    let mut denied = BTreeSet::new();
    for (ask, allowed) in answers {
        if !allowed {
            denied.insert(ask.denial());
            continue;
        }
        // The rules denied what the authorizer allows: the grants changed since the review.
        if let Some(namespace) = &ask.namespace
            && let Some(reviewed) = rules.get(namespace)
            && reviewed.rules.is_complete()
        {
            kinds.rules.forget(namespace, reviewed);
        }
    }
    Ok((denied, unserved))
}

/// Every write of `documents`, each object in its own namespace (the release's when it names
/// none) or at cluster scope, and the kinds no one serves.
async fn asks(
    client: &Client,
    kinds: &Kinds,
    documents: &[RenderedDocument],
    namespace: &str,
) -> Result<(BTreeSet<Ask>, BTreeSet<String>), kube::Error> {
    let own = crd_kinds(documents);
    let mut unserved = BTreeSet::new();
    let mut asks = BTreeSet::new();
    for RenderedDocument { object, .. } in documents {
        let kind = TypeRef {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
        };
        let resolved = match own.get(&kind) {
            Some(found) => found.clone(),
            None => match kinds.resolve(client, &kind).await {
                Ok(found) => found,
                Err(kube::Error::Api(status)) if status.code != 404 => {
                    return Err(kube::Error::Api(status));
                }
                Err(_) => {
                    unserved.insert(kind.to_string());
                    continue;
                }
            },
        };
        let object_namespace = resolved.namespaced.then(|| {
            object
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string())
        });
        for verb in VERBS {
            asks.insert(Ask {
                kind: resolved.clone(),
                namespace: object_namespace.clone(),
                name: object.name.clone(),
                verb,
            });
        }
    }
    Ok((asks, unserved))
}

/// The rules of each namespace that `asks` write into, reviewed side by side (or cached).
async fn namespace_rules(
    client: &Client,
    kinds: &Kinds,
    asks: &BTreeSet<Ask>,
) -> Result<HashMap<String, Reviewed>, kube::Error> {
    let namespaces: BTreeSet<String> = asks.iter().filter_map(|a| a.namespace.clone()).collect();
    let reviews = namespaces
        .into_iter()
        .map(|namespace| namespace_review(client, kinds, namespace));
    futures::stream::iter(reviews)
        .buffer_unordered(CONCURRENT_REVIEWS)
        .try_collect()
        .await
}

/// The rules of `namespace`, with its name.
async fn namespace_review(
    client: &Client,
    kinds: &Kinds,
    namespace: String,
) -> Result<(String, Reviewed), kube::Error> {
    let reviewed = kinds
        .rules
        .rules(&namespace, || rules::review(client, &namespace))
        .await?;
    Ok((namespace, reviewed))
}

/// Whether its namespace's rules allow `ask`; never at cluster scope.
fn allowed_by(rules: &HashMap<String, Reviewed>, ask: &Ask) -> bool {
    let Some(reviewed) = ask.namespace.as_ref().and_then(|n| rules.get(n)) else {
        return false;
    };
    reviewed.rules.allows(
        ask.verb,
        &ask.kind.group,
        &ask.kind.plural,
        ask.asked_name(),
    )
}

/// One SelfSubjectAccessReview: `ask`, and whether the authorizer allows it.
async fn review(client: &Client, ask: Ask) -> Result<(Ask, bool), kube::Error> {
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {
            "verb": ask.verb, "group": ask.kind.group, "resource": ask.kind.plural,
            "namespace": ask.namespace, "name": ask.asked_name(),
        }}
    }))
    .map_err(kube::Error::SerdeError)?;
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let allowed = answer.status.is_some_and(|s| s.allowed);
    Ok((ask, allowed))
}

/// Who writes a release, and so who must be granted what is denied.
pub enum Installer<'a> {
    /// This controller, on the management cluster, with what definition `namespace/name`
    /// grants it.
    Controller {
        /// The definition, `namespace/name`.
        definition: &'a str,
    },
    /// The identity a registered cluster's Secret gives; the operator grants nothing there.
    Remote {
        /// The cluster.
        cluster: &'a str,
        /// The registration Secret, `namespace/name`.
        secret: &'a str,
    },
}

/// What a composition can do about denied writes, in one message: on the management cluster,
/// the definition grants what its chart writes with its default values, in the release
/// namespace, in the namespaces that render writes into, and in the namespaces it lists; on a
/// registered cluster, whoever runs it grants the Secret's identity.
pub fn explain(
    denied: &BTreeSet<Denial>,
    unserved: &BTreeSet<String>,
    release_namespace: &str,
    installer: &Installer<'_>,
) -> String {
    let mut parts = Vec::new();
    if !unserved.is_empty() {
        let kinds: Vec<&str> = unserved.iter().map(String::as_str).collect();
        parts.push(format!(
            "the cluster does not serve {}; install their CRDs first",
            kinds.join(", ")
        ));
    }
    if !denied.is_empty() {
        let named: Vec<String> = denied
            .iter()
            .take(NAMED_DENIALS)
            .map(|d| d.to_string())
            .collect();
        let who = match installer {
            Installer::Controller { .. } => "this controller".to_string(),
            Installer::Remote { cluster, secret } => {
                format!("on cluster {cluster}, the identity of Secret {secret}")
            }
        };
        let mut line = format!("{who} may not {}", named.join(", "));
        if denied.len() > NAMED_DENIALS {
            line.push_str(&format!(" and {} more", denied.len() - NAMED_DENIALS));
        }
        parts.push(line);
        let Installer::Controller { definition } = installer else {
            parts.push("the operator grants nothing on a registered cluster: grant that identity what the chart writes there".into());
            return parts.join("; ");
        };
        let foreign: BTreeSet<&str> = denied
            .iter()
            .filter_map(|d| d.namespace.as_deref())
            .filter(|n| *n != release_namespace)
            .collect();
        if !foreign.is_empty() {
            let namespaces: Vec<&str> = foreign.into_iter().collect();
            parts.push(format!(
                "definition {definition} grants namespaces beyond the release namespace only when its chart writes there with its default values or spec.permissions.namespaces lists them (here: {})",
                namespaces.join(", ")
            ));
        }
        if denied.iter().any(|d| d.namespace.is_none()) {
            parts.push(format!(
                "cluster-scoped objects are granted by name, as definition {definition}'s chart renders them with its default values (see status.versions[].footprint)"
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(verb: &'static str, resource: &str, namespace: Option<&str>, name: &str) -> Denial {
        Denial {
            verb,
            resource: resource.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn a_message_names_the_object_and_what_would_allow_it() {
        let denied = [
            denial(
                "create",
                "applications.argoproj.io",
                Some("elsewhere"),
                "acme",
            ),
            denial(
                "patch",
                "clusterroles.rbac.authorization.k8s.io",
                None,
                "acme-x",
            ),
        ]
        .into();
        let message = explain(
            &denied,
            &BTreeSet::new(),
            "team",
            &Installer::Controller {
                definition: "demo/fireworksapp",
            },
        );
        assert!(
            message.starts_with(
                r#"this controller may not create applications.argoproj.io "acme" in namespace elsewhere, patch clusterroles.rbac.authorization.k8s.io "acme-x" (cluster-scoped)"#
            ),
            "{message}"
        );
        assert!(
            message.contains("spec.permissions.namespaces lists them (here: elsewhere)"),
            "{message}"
        );
        assert!(message.contains("granted by name"), "{message}");
    }

    #[test]
    fn long_lists_are_counted_and_unserved_kinds_named() {
        let denied: BTreeSet<Denial> = (0..8)
            .map(|i| denial("create", "configmaps", Some("team"), &format!("c{i}")))
            .collect();
        let unserved = ["example.com/v1/Widget".to_string()].into();
        let message = explain(
            &denied,
            &unserved,
            "team",
            &Installer::Controller {
                definition: "demo/app",
            },
        );
        assert!(message.starts_with("the cluster does not serve example.com/v1/Widget; install their CRDs first; this controller may not"), "{message}");
        assert!(message.contains("and 3 more"), "{message}");
        assert!(
            !message.contains("spec.permissions"),
            "the release namespace needs no listing: {message}"
        );
    }

    #[test]
    fn on_a_registered_cluster_the_secrets_identity_is_blamed() {
        let denied = BTreeSet::from([denial("create", "secrets", Some("acme"), "x")]);
        let installer = Installer::Remote {
            cluster: "edge",
            secret: "compositor/edge",
        };
        let message = explain(&denied, &BTreeSet::new(), "acme", &installer);
        assert_eq!(
            message,
            "on cluster edge, the identity of Secret compositor/edge may not create secrets \"x\" \
             in namespace acme; the operator grants nothing on a registered cluster: grant that \
             identity what the chart writes there"
        );
    }
}
