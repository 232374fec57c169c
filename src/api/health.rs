//! When a composition counts as running (`spec.health` of a definition): whether it waits for
//! what its release runs to be healthy, how long that may take, and the definition's own rules
//! for kinds whose status no built-in rule reads, as CEL expressions compiled once ([`Checks`])
//! by the operator, which refuses a definition whose checks do not compile, and by each
//! controller, which judges objects with them.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Whether a composition is Ready only once what its release runs is healthy, and how long
/// that may take.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// Wait (default) or Ignore.
    #[serde(default)]
    pub mode: HealthMode,
    /// How long a release may take to become healthy after it is written, or after it was last
    /// healthy, before the composition reads Unhealthy (default 300).
    #[serde(default = "HealthSpec::default_timeout")]
    pub timeout_seconds: u32,
    /// How objects of a kind are judged, in place of the built-in rule for that kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<HealthCheck>,
}

impl HealthSpec {
    fn default_timeout() -> u32 {
        300
    }
}

impl Default for HealthSpec {
    fn default() -> Self {
        HealthSpec {
            mode: HealthMode::default(),
            timeout_seconds: HealthSpec::default_timeout(),
            checks: Vec::new(),
        }
    }
}

/// Whether the health of what a release runs decides Ready.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HealthMode {
    /// Ready once every object the release keeps is healthy: workloads available, Jobs
    /// complete, claims bound, custom objects Ready.
    #[default]
    Wait,
    /// Ready once Helm has written the release, for charts whose workloads never settle.
    Ignore,
}

/// How objects of one kind are judged: CEL expressions over the object (`self`) and its
/// `metadata`, `spec` and `status` (an empty map when the object has none).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// The kind's group and version (`example.com/v1`), as in the objects' `apiVersion`.
    pub api_version: String,
    /// The kind (`Widget`).
    pub kind: String,
    /// True once the object is healthy (`status.phase == 'Running'`).
    pub ready: String,
    /// True once the object has failed and will not recover by itself; evaluated first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A definition's checks, compiled.
#[derive(Clone)]
pub struct Checks {
    /// CEL's standard functions and macros, built once.
    env: Arc<cel::Env>,
    compiled: Vec<Compiled>,
}

impl Default for Checks {
    fn default() -> Self {
        Checks {
            env: Arc::new(cel::Env::stdlib()),
            compiled: Vec::new(),
        }
    }
}

#[derive(Clone)]
struct Compiled {
    /// The group, without the version: a check holds for every version of its kind.
    group: String,
    kind: String,
    ready: Expression,
    failed: Option<Expression>,
}

#[derive(Clone)]
struct Expression {
    source: String,
    program: Arc<cel::Program>,
}

/// A check that does not compile: which, and the compiler's words.
#[derive(Debug, thiserror::Error)]
#[error("spec.health.checks[{index}].{field}: {message}")]
pub struct CheckError {
    /// Its place in `spec.health.checks`.
    pub index: usize,
    /// `ready`, `failed` or `kind`.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

/// What a check says of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// `ready` holds.
    Ready,
    /// `ready` does not hold yet, or cannot be evaluated: what it waits for.
    Waiting(String),
    /// `failed` holds.
    Failed(String),
}

impl Checks {
    /// Compiles `checks`; the first that does not compile is the error. A check of Secrets is
    /// refused, since a controller never reads their data.
    pub fn compile(checks: &[HealthCheck]) -> Result<Checks, CheckError> {
        let env = Checks::default().env;
        let compile = |source: &str| {
            let program = env.compile(source).map_err(|errors| errors.to_string())?;
            Ok::<_, String>(Expression {
                source: source.to_string(),
                program: Arc::new(program),
            })
        };
        let compiled = checks
            .iter()
            .enumerate()
            .map(|(index, check)| {
                let group = check.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                if (group, check.kind.as_str()) == ("", "Secret") {
                    return Err(CheckError {
                        index,
                        field: "kind",
                        message: "Secrets cannot be checked: their data is never read".into(),
                    });
                }
                let ready = compile(&check.ready).map_err(|message| CheckError {
                    index,
                    field: "ready",
                    message,
                })?;
                let failed = check.failed.as_deref().map(compile);
                let failed = failed.transpose().map_err(|message| CheckError {
                    index,
                    field: "failed",
                    message,
                })?;
                Ok(Compiled {
                    group: group.to_string(),
                    kind: check.kind.clone(),
                    ready,
                    failed,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Checks { env, compiled })
    }

    /// Whether objects of `(group, kind)` are judged by a check.
    pub fn covers(&self, group: &str, kind: &str) -> bool {
        self.find(group, kind).is_some()
    }

    /// What the check of `(group, kind)` says of `object`, if there is one.
    pub fn judge(&self, group: &str, kind: &str, object: &impl Serialize) -> Option<Check> {
        let check = self.find(group, kind)?;
        let object = serde_json::to_value(object).unwrap_or_default();
        let context = self.variables(&object);
        if let Some(failed) = &check.failed {
            match failed.holds(&context) {
                Ok(true) => return Some(Check::Failed(format!("`{}` holds", failed.source))),
                Ok(false) => {}
                Err(error) => return Some(Check::Waiting(error)),
            }
        }
        Some(match check.ready.holds(&context) {
            Ok(true) => Check::Ready,
            Ok(false) => Check::Waiting(format!("`{}` does not hold yet", check.ready.source)),
            Err(error) => Check::Waiting(error),
        })
    }

    /// The variables a check sees: the object as `self`, and its `metadata`, `spec` and
    /// `status` (empty maps when absent, so that `has(status.x)` asks what it means to),
    /// managed fields left out.
    fn variables(&self, object: &Value) -> cel::Context<'static, 'static> {
        let mut context = cel::Context::with_env(self.env.clone());
        let mut whole = object.clone();
        if let Some(metadata) = whole["metadata"].as_object_mut() {
            metadata.remove("managedFields");
        }
        for field in ["metadata", "spec", "status"] {
            let value = match &whole[field] {
                Value::Null => Value::Object(Default::default()),
                value => value.clone(),
            };
            context.add_variable_from_value(field, to_cel(&value));
        }
        context.add_variable_from_value("self", to_cel(&whole));
        context
    }

    fn find(&self, group: &str, kind: &str) -> Option<&Compiled> {
        self.compiled
            .iter()
            .find(|c| c.group == group && c.kind == kind)
    }
}

impl Expression {
    /// Whether the expression is true in `context`; why it cannot tell, when it cannot.
    fn holds(&self, context: &cel::Context) -> Result<bool, String> {
        match self.program.execute(context) {
            Ok(cel::Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!(
                "`{}` gives {:?}, not a bool",
                self.source,
                other.type_of()
            )),
            Err(error) => Err(format!("`{}`: {error}", self.source)),
        }
    }
}

fn to_cel(value: &Value) -> cel::Value {
    cel::to_value(value).unwrap_or(cel::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(ready: &str, failed: Option<&str>) -> HealthCheck {
        HealthCheck {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            ready: ready.into(),
            failed: failed.map(str::to_string),
        }
    }

    #[test]
    fn a_check_judges_its_kind_by_its_expressions() {
        let checks = Checks::compile(&[check(
            "status.phase == 'Running'",
            Some("status.phase == 'Broken'"),
        )])
        .unwrap();
        let widget = |phase: &str| json!({"metadata": {"name": "w"}, "status": {"phase": phase}});
        let judge = |object: &Value| checks.judge("example.com", "Widget", object);
        assert_eq!(judge(&widget("Running")), Some(Check::Ready));
        assert_eq!(
            judge(&widget("Pending")),
            Some(Check::Waiting(
                "`status.phase == 'Running'` does not hold yet".into()
            ))
        );
        assert_eq!(
            judge(&widget("Broken")),
            Some(Check::Failed("`status.phase == 'Broken'` holds".into()))
        );
        assert_eq!(
            checks.judge("example.com", "Gadget", &widget("Broken")),
            None
        );
        assert!(checks.covers("example.com", "Widget"));
        assert!(!checks.covers("other.com", "Widget"));
    }

    #[test]
    fn an_object_without_status_waits_and_self_is_the_whole_object() {
        let checks = Checks::compile(&[check(
            "has(status.ready) && status.ready && self.metadata.name == 'w'",
            None,
        )])
        .unwrap();
        let waiting = checks.judge("example.com", "Widget", &json!({"metadata": {"name": "w"}}));
        assert!(matches!(waiting, Some(Check::Waiting(_))), "{waiting:?}");
        let ready = json!({"metadata": {"name": "w"}, "status": {"ready": true}});
        assert_eq!(
            checks.judge("example.com", "Widget", &ready),
            Some(Check::Ready)
        );
    }

    #[test]
    fn an_expression_that_cannot_be_evaluated_or_is_no_bool_waits_with_why() {
        let checks = Checks::compile(&[check("status.missing.deeper", None)]).unwrap();
        let Some(Check::Waiting(why)) = checks.judge("example.com", "Widget", &json!({})) else {
            panic!("an unevaluable check must wait");
        };
        assert!(why.starts_with("`status.missing.deeper`: "), "{why}");
        let checks = Checks::compile(&[check("'yes'", None)]).unwrap();
        let Some(Check::Waiting(why)) = checks.judge("example.com", "Widget", &json!({})) else {
            panic!("a check that is no bool must wait");
        };
        assert!(why.contains("not a bool"), "{why}");
    }

    #[test]
    fn a_check_that_does_not_compile_names_its_place_and_the_compilers_words() {
        let error = Checks::compile(&[check("true", None), check("true", Some("status.phase =="))])
            .err()
            .expect("a check that does not compile is refused");
        assert_eq!((error.index, error.field), (1, "failed"));
        let message = error.to_string();
        assert!(
            message.starts_with("spec.health.checks[1].failed: ERROR: <input>:1:"),
            "{message}"
        );
    }

    #[test]
    fn secrets_cannot_be_checked() {
        let mut secret = check("true", None);
        (secret.api_version, secret.kind) = ("v1".into(), "Secret".into());
        let error = Checks::compile(&[secret]).err().unwrap();
        assert_eq!((error.index, error.field), (0, "kind"));
    }
}
