//! The pre-install check: every object Helm would write (templates, hooks and the chart's
//! `crds/`) is put to the real authorizer, in the object's own namespace or at cluster scope,
//! before any Helm call, so that nothing is installed halfway.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::json;

use crate::bundle::{ResolvedKind, TypeRef, crd_kinds};
use crate::helm::RenderedDocument;

/// Access reviews in flight at once.
const CONCURRENT_REVIEWS: usize = 8;
/// Denials named in one message; the rest are counted.
const NAMED_DENIALS: usize = 5;

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

/// Resolves kinds to resources by discovery, remembering what it found: a served kind does not
/// change its resource or scope.
#[derive(Default)]
pub struct Kinds {
    known: Mutex<HashMap<TypeRef, ResolvedKind>>,
}

impl Kinds {
    async fn resolve(&self, client: &Client, kind: &TypeRef) -> Result<ResolvedKind, kube::Error> {
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

/// What the controller may not write of `documents` when installed into `namespace`, and the
/// kinds neither the cluster nor the chart's own CRDs serve. Every object is asked for `create`
/// (which Kubernetes cannot limit by name), and `patch` and `delete` by name.
pub async fn denials(
    client: &Client,
    kinds: &Kinds,
    documents: &[RenderedDocument],
    namespace: &str,
) -> Result<(BTreeSet<Denial>, BTreeSet<String>), kube::Error> {
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
        for verb in ["create", "patch", "delete"] {
            asks.insert((
                resolved.clone(),
                object_namespace.clone(),
                object.name.clone(),
                verb,
            ));
        }
    }
    let reviews: Vec<_> = asks
        .into_iter()
        .map(|(kind, namespace, name, verb)| review(client, kind, namespace, name, verb))
        .collect();
    let answers: Vec<_> = futures::stream::iter(reviews)
        .buffer_unordered(CONCURRENT_REVIEWS)
        .collect()
        .await;
    let mut denied = BTreeSet::new();
    for answer in answers {
        denied.extend(answer?);
    }
    Ok((denied, unserved))
}

/// One SelfSubjectAccessReview, the denial when refused; `create` is asked without the name,
/// as Kubernetes authorizes it.
async fn review(
    client: &Client,
    kind: ResolvedKind,
    namespace: Option<String>,
    name: String,
    verb: &'static str,
) -> Result<Option<Denial>, kube::Error> {
    let asked_name = (verb != "create").then_some(&name);
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {
            "verb": verb, "group": kind.group, "resource": kind.plural, "namespace": namespace, "name": asked_name,
        }}
    }))
    .map_err(kube::Error::SerdeError)?;
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let allowed = answer.status.is_some_and(|s| s.allowed);
    Ok((!allowed).then(|| Denial {
        verb,
        resource: kind.to_string(),
        namespace,
        name,
    }))
}

/// What a composition can do about denied writes, in one message: the definition grants what
/// its chart writes with its default values, in the release namespace, in the namespaces that
/// render writes into, and in the namespaces it lists.
pub fn explain(
    denied: &BTreeSet<Denial>,
    unserved: &BTreeSet<String>,
    release_namespace: &str,
    definition: &str,
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
        let mut line = format!("this controller may not {}", named.join(", "));
        if denied.len() > NAMED_DENIALS {
            line.push_str(&format!(" and {} more", denied.len() - NAMED_DENIALS));
        }
        parts.push(line);
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
        let message = explain(&denied, &BTreeSet::new(), "team", "demo/fireworksapp");
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
        let message = explain(&denied, &unserved, "team", "demo/app");
        assert!(message.starts_with("the cluster does not serve example.com/v1/Widget; install their CRDs first; this controller may not"), "{message}");
        assert!(message.contains("and 3 more"), "{message}");
        assert!(
            !message.contains("spec.permissions"),
            "the release namespace needs no listing: {message}"
        );
    }
}
