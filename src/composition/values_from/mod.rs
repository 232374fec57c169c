//! `spec.valuesFrom`: values from ConfigMaps and Secrets in the composition's own namespace,
//! merged in list order as Helm merges values files, then the spec's own values on top (Flux's
//! order). They are read as the release identity of that namespace, the identity Helm runs as,
//! so a tenant can name only what that identity may read there; and followed by a watch of each
//! object by name ([`Sources`]).
//!
//! A Secret's content is never shown: not in the status (the fingerprint there carries the
//! Secret's version, not its content, which a hash of few values would give away), nor in a
//! condition (a schema refusal names the path, a key that holds no values names the key), nor in
//! Helm's words, which are withheld.

mod merge;
mod watch;

pub(crate) use watch::Sources;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error};
use crate::api::{SourceKind, ValuesSource, values_sources_of};
use merge::{at_path, merge};

/// A composition's values, with what they came from.
pub(super) struct Values {
    /// What Helm is given.
    pub merged: Value,
    /// What the fingerprint is made of: the merged values without any Secret's content, and
    /// the version of each Secret read.
    pub identity: Value,
    /// Whether a Secret gave some of them: Helm's words are then withheld.
    pub from_secret: bool,
}

/// The values of `object`: those of the objects its `spec.valuesFrom` names, in order, with
/// `own` (its spec's) on top.
pub(super) async fn values(
    object: &DynamicObject,
    context: &Context,
    own: Value,
) -> Result<Values, Error> {
    let sources = values_sources_of(&object.data["spec"]).map_err(Error::ValuesSourceNotAllowed)?;
    let namespace = object.namespace().unwrap_or_default();
    let composition = (namespace.clone(), object.name_any());
    if sources.is_empty() {
        context.values_sources.forget(&composition);
        return Ok(Values {
            merged: own.clone(),
            identity: own,
            from_secret: false,
        });
    }
    for (at, source) in sources.iter().enumerate() {
        allowed(at, source, &namespace)?;
    }
    let identity = context.release_identity(&namespace);
    let client = context
        .values_sources
        .reader(&namespace, &identity)
        .map_err(Error::ValuesSourceNotReadable)?;
    let named: BTreeSet<(SourceKind, String)> =
        sources.iter().map(|s| (s.kind, s.name.clone())).collect();
    context.values_sources.follow(&composition, named, &client);
    let mut values = Values {
        merged: json!({}),
        identity: json!({}),
        from_secret: false,
    };
    let mut versions = Vec::new();
    for source in &sources {
        let place = format!(
            "{} {namespace}/{} key {}",
            source.kind, source.name, source.key
        );
        let Some((content, version)) = read(&client, &namespace, source, &identity).await? else {
            if source.optional {
                continue;
            }
            return Err(Error::ValuesSourceMissing(format!(
                "{place} is absent; the composition is installed once it is there"
            )));
        };
        let taken = taken(source, &content)
            .map_err(|why| Error::ValuesSourceInvalid(format!("{place} {why}")))?;
        merge(&mut values.merged, taken.clone());
        match source.kind {
            SourceKind::ConfigMap => merge(&mut values.identity, taken),
            SourceKind::Secret => {
                values.from_secret = true;
                versions.push(format!("{}/{}@{version}", namespace, source.name));
            }
        }
    }
    merge(&mut values.merged, own.clone());
    merge(&mut values.identity, own);
    if !versions.is_empty() {
        values.identity = json!({"values": values.identity, "secrets": versions});
    }
    Ok(values)
}

/// Refuses a source in another namespace.
fn allowed(at: usize, source: &ValuesSource, namespace: &str) -> Result<(), Error> {
    match source.namespace.as_ref().filter(|n| *n != namespace) {
        Some(other) => Err(Error::ValuesSourceNotAllowed(format!(
            "spec.valuesFrom[{at}].namespace: {other} is not this composition's namespace \
             ({namespace}): values come only from objects in its own"
        ))),
        None => Ok(()),
    }
}

/// Secrets whose content would give more than values: a ServiceAccount's token (a way to act
/// as it), and Helm's records of releases (another release's values).
const NEVER_VALUES: [&str; 2] = ["kubernetes.io/service-account-token", "helm.sh/release.v1"];

/// The content of `source`'s key and the object's version (its UID and resourceVersion), read
/// as `identity`; `None` when the object or the key is absent.
async fn read(
    client: &Client,
    namespace: &str,
    source: &ValuesSource,
    identity: &str,
) -> Result<Option<(String, String)>, Error> {
    let refused = |e: kube::Error| match e {
        kube::Error::Api(status) if status.code == 403 => Error::ValuesSourceNotReadable(format!(
            "{identity}, the release identity, may not read {} {namespace}/{}",
            source.kind, source.name
        )),
        e => Error::Kube("read a values source", e),
    };
    let version = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}/{}",
            meta.uid.as_deref().unwrap_or_default(),
            meta.resource_version.as_deref().unwrap_or_default()
        )
    };
    Ok(match source.kind {
        SourceKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
            let found = api.get_opt(&source.name).await.map_err(refused)?;
            found.and_then(|map| {
                let content = map.data.as_ref()?.get(&source.key)?.clone();
                Some((content, version(&map.metadata)))
            })
        }
        SourceKind::Secret => {
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            let found = api.get_opt(&source.name).await.map_err(refused)?;
            if let Some(kind) = found.as_ref().and_then(|s| s.type_.as_deref())
                && NEVER_VALUES.contains(&kind)
            {
                return Err(Error::ValuesSourceNotAllowed(format!(
                    "Secret {namespace}/{} is of type {kind}, which is never a values source",
                    source.name
                )));
            }
            match found {
                Some(secret) => match secret.data.as_ref().and_then(|d| d.get(&source.key)) {
                    Some(bytes) => {
                        let content = String::from_utf8(bytes.0.clone()).map_err(|_| {
                            Error::ValuesSourceInvalid(format!(
                                "Secret {namespace}/{} key {} is not text",
                                source.name, source.key
                            ))
                        })?;
                        Some((content, version(&secret.metadata)))
                    }
                    None => None,
                },
                None => None,
            }
        }
    })
}

/// The values `content` gives: at `targetPath` as a string, else the YAML map it holds. The
/// reason it holds none never quotes it.
fn taken(source: &ValuesSource, content: &str) -> Result<Value, String> {
    if source.target_path.is_some() {
        return Ok(at_path(
            &source.target(),
            Value::String(content.to_string()),
        ));
    }
    let parsed: Result<Value, _> = serde_saphyr::from_str(content);
    match parsed {
        Ok(Value::Object(map)) => Ok(Value::Object(map)),
        Ok(Value::Null) => Ok(json!({})),
        Ok(_) => Err("holds no map of values (set targetPath to take it as one value)".into()),
        Err(_) => Err("is not YAML".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(target_path: Option<&str>) -> ValuesSource {
        serde_json::from_value(json!({"kind": "Secret", "name": "db", "key": "v",
                                      "targetPath": target_path}))
        .unwrap()
    }

    #[test]
    fn content_is_a_map_of_values_or_one_value_at_its_path_and_never_quoted() {
        let map = taken(&source(None), "image:\n  tag: \"2\"\n").unwrap();
        assert_eq!(map, json!({"image": {"tag": "2"}}));
        assert_eq!(taken(&source(None), "").unwrap(), json!({}));
        let one = taken(&source(Some("db.password")), "hunter2: not yaml: [").unwrap();
        assert_eq!(one, json!({"db": {"password": "hunter2: not yaml: ["}}));
        for secret in ["hunter2", "[hunter2", "- hunter2"] {
            let why = taken(&source(None), secret).unwrap_err();
            assert!(!why.contains("hunter2"), "{why}");
        }
    }
}
