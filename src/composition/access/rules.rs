//! A namespace's rules as one SelfSubjectRulesReview lists them, kept for a short time and
//! evaluated here the way RBAC evaluates them, so that checking a whole chart costs one request
//! per namespace instead of one per object and verb.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How long a namespace's rules are trusted. Grants change while compositions come and go (the
/// operator binds a namespace once a composition needs it), but only a stale "allowed" goes
/// unchecked, since every local denial is confirmed by an access review. A write on a grant
/// revoked since then is refused by the apiserver during the Helm call and reported like any
/// Helm refusal. Ten seconds lets a burst of installs into one namespace share one review
/// while keeping that window short.
pub(super) const RULES_TTL: Duration = Duration::from_secs(10);

/// What a rules review said of one namespace.
#[derive(Debug)]
pub(super) enum Rules {
    /// Every rule that applies there, from RoleBindings and ClusterRoleBindings alike. A rule
    /// the review could not evaluate (an evaluation error, such as a binding to a missing role)
    /// is left out, which can only make a local denial, and denials are confirmed.
    Complete(Vec<ResourceRule>),
    /// An authorizer could not list its rules (a webhook, say), and it may deny what a rule
    /// allows: only access reviews can tell.
    Incomplete,
}

impl Rules {
    /// Whether the rules are known to allow `verb` on `resource` of `group` (`""` for the core
    /// group) for the object `name`; `None` stands for `create`, which Kubernetes authorizes
    /// before the object has a name.
    pub(super) fn allows(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        name: Option<&str>,
    ) -> bool {
        match self {
            Rules::Complete(rules) => rules
                .iter()
                .any(|rule| rule_allows(rule, verb, group, resource, name)),
            Rules::Incomplete => false,
        }
    }

    /// Whether the review listed every rule.
    pub(super) fn is_complete(&self) -> bool {
        matches!(self, Rules::Complete(_))
    }
}

/// RBAC's own matching: verb, group and resource each listed or `*`. The ask is always on the
/// main resource, so a `*/subresource` rule never matches it.
fn rule_allows(
    rule: &ResourceRule,
    verb: &str,
    group: &str,
    resource: &str,
    name: Option<&str>,
) -> bool {
    let lists = |listed: &[String], wanted: &str| listed.iter().any(|l| l == "*" || l == wanted);
    lists(&rule.verbs, verb)
        && lists(rule.api_groups.as_deref().unwrap_or_default(), group)
        && lists(rule.resources.as_deref().unwrap_or_default(), resource)
        && names_match(rule.resource_names.as_deref().unwrap_or_default(), name)
}

/// No names means any name. Otherwise the object's own name must be listed: RBAC compares names
/// literally (a listed `*` is no wildcard), and `create` asks without a name, so a rule that
/// lists names never allows it.
fn names_match(names: &[String], name: Option<&str>) -> bool {
    names.is_empty() || name.is_some_and(|name| names.iter().any(|n| n == name))
}

/// Asks the authorizer what the client's identity may do in `namespace`.
pub(super) async fn review(client: &Client, namespace: &str) -> Result<Rules, kube::Error> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_string()),
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(match answer.status {
        Some(status) if !status.incomplete => Rules::Complete(status.resource_rules),
        _ => Rules::Incomplete,
    })
}

/// A review's answer and when it came.
struct Answer {
    at: Instant,
    rules: Arc<Rules>,
}

/// One namespace's answer: empty while the review is in flight (or failed, for the next caller
/// to try again).
type Slot = Arc<OnceCell<Answer>>;

/// The rules of each namespace, as the last review listed them. Callers asking for the same
/// namespace at once share one review, and an answer serves for [`RULES_TTL`].
#[derive(Default)]
pub(super) struct RulesCache {
    namespaces: Mutex<HashMap<String, Slot>>,
}

/// A namespace's rules, and the answer they came from, so that they can be forgotten.
pub(super) struct Reviewed {
    /// What the review said.
    pub rules: Arc<Rules>,
    slot: Slot,
}

impl RulesCache {
    /// The rules of `namespace`: a fresh answer at hand, the one in flight, or a new one from
    /// `review`. A failed review is not kept.
    pub(super) async fn rules<R, E>(
        &self,
        namespace: &str,
        review: impl FnOnce() -> R,
    ) -> Result<Reviewed, E>
    where
        R: Future<Output = Result<Rules, E>>,
    {
        let slot = self.slot(namespace);
        let answer = slot
            .get_or_try_init(|| async {
                let rules = Arc::new(review().await?);
                Ok::<_, E>(Answer {
                    at: Instant::now(),
                    rules,
                })
            })
            .await?;
        Ok(Reviewed {
            rules: answer.rules.clone(),
            slot: slot.clone(),
        })
    }

    /// Drops the answer `reviewed` came from, once an access review allowed what it denied: the
    /// grants changed since, and the next check reviews again. A newer answer stays.
    pub(super) fn forget(&self, namespace: &str, reviewed: &Reviewed) {
        let mut namespaces = self.lock();
        if namespaces
            .get(namespace)
            .is_some_and(|slot| Arc::ptr_eq(slot, &reviewed.slot))
        {
            namespaces.remove(namespace);
        }
    }

    /// The slot of `namespace`, a new one unless a fresh answer or a review in flight is there.
    fn slot(&self, namespace: &str) -> Slot {
        let now = Instant::now();
        let mut namespaces = self.lock();
        // Stale answers of every namespace go, so that only namespaces in use are kept.
        namespaces.retain(|_, slot| {
            slot.get()
                .is_none_or(|answer| now.duration_since(answer.at) < RULES_TTL)
        });
        namespaces.entry(namespace.to_string()).or_default().clone()
    }

    /// The map; a panic elsewhere while it was held leaves it consistent (each change is one
    /// call), so a poisoned lock is used as it is.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> ResourceRule {
        let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ResourceRule {
            verbs: owned(verbs),
            api_groups: Some(owned(groups)),
            resources: Some(owned(resources)),
            resource_names: (!names.is_empty()).then(|| owned(names)),
        }
    }

    fn complete(rules: Vec<ResourceRule>) -> Rules {
        Rules::Complete(rules)
    }

    #[test]
    fn verbs_groups_and_resources_must_all_be_listed() {
        let rules = complete(vec![rule(
            &["create", "patch"],
            &["apps"],
            &["deployments"],
            &[],
        )]);
        assert!(rules.allows("create", "apps", "deployments", None));
        assert!(rules.allows("patch", "apps", "deployments", Some("web")));
        assert!(!rules.allows("delete", "apps", "deployments", Some("web")));
        assert!(
            !rules.allows("create", "", "deployments", None),
            "core is not apps"
        );
        assert!(!rules.allows("create", "apps", "statefulsets", None));
        assert!(!rules.allows("create", "apps", "deployments/scale", None));
    }

    #[test]
    fn the_core_group_is_the_empty_string() {
        let rules = complete(vec![rule(&["create"], &[""], &["configmaps"], &[])]);
        assert!(rules.allows("create", "", "configmaps", None));
        assert!(!rules.allows("create", "apps", "configmaps", None));
    }

    #[test]
    fn stars_match_any_verb_group_and_resource() {
        let admin = complete(vec![rule(&["*"], &["*"], &["*"], &[])]);
        assert!(admin.allows("delete", "argoproj.io", "applications", Some("a")));
        assert!(admin.allows("create", "", "secrets", None));
        let verbs = complete(vec![rule(&["*"], &[""], &["services"], &[])]);
        assert!(verbs.allows("patch", "", "services", Some("s")));
        assert!(!verbs.allows("patch", "", "secrets", Some("s")));
        let resources = complete(vec![rule(&["create"], &["batch"], &["*"], &[])]);
        assert!(resources.allows("create", "batch", "cronjobs", None));
        assert!(!resources.allows("create", "apps", "deployments", None));
    }

    #[test]
    fn a_subresource_rule_does_not_allow_the_resource() {
        let rules = complete(vec![rule(
            &["*"],
            &["apps"],
            &["*/scale", "deployments/status"],
            &[],
        )]);
        assert!(!rules.allows("patch", "apps", "deployments", Some("web")));
    }

    #[test]
    fn names_limit_patch_and_delete_and_never_allow_create() {
        let rules = complete(vec![rule(
            &["create", "patch", "delete"],
            &[""],
            &["configmaps"],
            &["acme-config"],
        )]);
        assert!(rules.allows("patch", "", "configmaps", Some("acme-config")));
        assert!(rules.allows("delete", "", "configmaps", Some("acme-config")));
        assert!(!rules.allows("patch", "", "configmaps", Some("other")));
        assert!(
            !rules.allows("create", "", "configmaps", None),
            "create is asked without a name"
        );
        let star = complete(vec![rule(&["patch"], &[""], &["configmaps"], &["*"])]);
        assert!(
            !star.allows("patch", "", "configmaps", Some("acme")),
            "RBAC compares names literally"
        );
    }

    #[test]
    fn any_one_rule_allows() {
        let rules = complete(vec![
            rule(&["create"], &[""], &["configmaps"], &[]),
            rule(&["patch"], &[""], &["configmaps"], &["acme"]),
        ]);
        assert!(rules.allows("create", "", "configmaps", None));
        assert!(rules.allows("patch", "", "configmaps", Some("acme")));
        assert!(!rules.allows("patch", "", "configmaps", Some("other")));
        assert!(!complete(Vec::new()).allows("create", "", "configmaps", None));
    }

    #[test]
    fn incomplete_rules_allow_nothing() {
        assert!(!Rules::Incomplete.allows("create", "", "configmaps", None));
        assert!(!Rules::Incomplete.is_complete());
    }

    /// A review that counts its calls and answers no rules.
    async fn counted(calls: &AtomicUsize) -> Result<Rules, ()> {
        calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(Rules::Complete(Vec::new()))
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_review_until_it_is_stale() {
        let cache = RulesCache::default();
        let calls = AtomicUsize::new(0);
        let ask = || cache.rules("team", || counted(&calls));
        let (a, b, c) = tokio::join!(ask(), ask(), ask());
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one review in flight");
        ask().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the answer is fresh");
        cache.rules("other", || counted(&calls)).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one review per namespace");
        tokio::time::advance(RULES_TTL).await;
        ask().await.unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "a stale answer is reviewed again"
        );
        assert_eq!(cache.lock().len(), 1, "the other stale answer is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_review_is_not_kept_and_a_forgotten_answer_is_reviewed_again() {
        let cache = RulesCache::default();
        let calls = AtomicUsize::new(0);
        let failed = cache.rules("team", || async { Err::<Rules, _>("refused") });
        assert_eq!(failed.await.err(), Some("refused"));
        let reviewed = cache.rules("team", || counted(&calls)).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the failure was not kept");
        let newer = {
            cache.forget("team", &reviewed);
            cache.rules("team", || counted(&calls)).await.unwrap()
        };
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "forgotten, so reviewed again"
        );
        cache.forget("team", &reviewed);
        cache.rules("team", || counted(&calls)).await.unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "forgetting an older answer keeps the newer one"
        );
        assert!(newer.rules.is_complete());
    }
}
