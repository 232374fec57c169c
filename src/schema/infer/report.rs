//! What an inference guessed, one line per kind of rule with its count: every inferred type is
//! a guess a value the chart's author meant to accept could break, so the definition's status
//! and `compositor crd` say which guesses were made.

use std::collections::BTreeMap;

use super::comments::Source;

/// The rule that gave a node its schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rule {
    /// A string default.
    String,
    /// A string default that reads as a number: still a string.
    NumericString,
    /// A whole-number default.
    Integer,
    /// A fractional default.
    Float,
    /// A whole-number default the templates do float arithmetic with.
    FloatArithmetic,
    /// A boolean default.
    Boolean,
    /// A Kubernetes int-or-string field, or a list of numbers and strings.
    IntOrString,
    /// A `null` default whose comment names a type.
    NullHinted,
    /// A list whose elements share a type.
    TypedList,
    /// A map the templates read key by key: unknown keys refused.
    ClosedMap,
    /// A map the templates use whole.
    MapUsedWhole,
    /// A map no template reads.
    MapUnread,
    /// A map inside a list: range variables cannot be followed.
    MapInList,
    /// `{}`.
    EmptyMap,
    /// `null`.
    Null,
    /// An empty list, or one of mixed elements.
    OpenList,
    /// Values of different types.
    Mixed,
    /// `global`, which subcharts share.
    Global,
    /// A subchart's values.
    Subchart,
    /// A path of `spec.schema.openKeys`.
    OpenKey,
}

impl Rule {
    /// Whether a node of this rule can refuse a value.
    pub(crate) fn refuses(self) -> bool {
        matches!(
            self,
            Rule::String
                | Rule::NumericString
                | Rule::Integer
                | Rule::Float
                | Rule::FloatArithmetic
                | Rule::Boolean
                | Rule::IntOrString
                | Rule::NullHinted
                | Rule::TypedList
                | Rule::ClosedMap
        )
    }

    fn line(self, n: usize) -> String {
        let what = match self {
            Rule::String => "string, from a string default",
            Rule::NumericString => {
                "string, from a string default that reads as a number (it stays a string)"
            }
            Rule::Integer => {
                "integer, from a whole-number default (Helm hands templates every number as a float, but such defaults end in fields like replicas and ports that refuse fractions)"
            }
            Rule::Float => "number, from a fractional default",
            Rule::FloatArithmetic => {
                "number, from a whole-number default the templates do float arithmetic with"
            }
            Rule::Boolean => "boolean, from a true/false default",
            Rule::IntOrString => {
                "integer or string, for Kubernetes int-or-string fields (maxSurge, maxUnavailable, minAvailable, targetPort) and lists of both"
            }
            Rule::NullHinted => "nullable, of the type its comment names, from a null default",
            Rule::TypedList => "list of one item type, from its elements",
            Rule::ClosedMap => "map refusing unknown keys: the templates read it key by key",
            Rule::MapUsedWhole => {
                "map keeping unknown keys: the templates use it whole (toYaml, range, with, a helper)"
            }
            Rule::MapUnread => "map keeping unknown keys: no template reads it by key",
            Rule::MapInList => "map in a list, keeping unknown keys",
            Rule::EmptyMap => "map of any keys, from a {} default",
            Rule::Null => "any value, from a null default",
            Rule::OpenList => "list of any items, from an empty list or one of mixed elements",
            Rule::Mixed => "any value, from values of different types",
            Rule::Global => "map keeping unknown keys: global, shared with subcharts",
            Rule::Subchart => {
                "subchart values keeping unknown keys, typed from the subchart's values.yaml under its key"
            }
            Rule::OpenKey => "any value: spec.schema.openKeys",
        };
        format!("{n} {what}")
    }
}

/// How the top level of the values was inferred.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Root {
    /// Unknown top-level keys are refused.
    #[default]
    Closed,
    /// A template reads `.Values` whole, so any top-level key may matter.
    Dynamic(String),
    /// `spec.schema.openKeys` lists the top level.
    Open,
}

/// What an inference did, counted by rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub(crate) rules: BTreeMap<Rule, usize>,
    pub(crate) descriptions: BTreeMap<Source, usize>,
    pub(crate) root: Root,
    /// The chart's own values.schema.json was set aside (`spec.schema.infer: Always`).
    pub(crate) declared: bool,
    /// Paths of `spec.schema.openKeys` that name no key.
    pub(crate) unmatched: Vec<String>,
}

impl Report {
    pub(crate) fn count(&mut self, rule: Rule) {
        *self.rules.entry(rule).or_default() += 1;
    }

    fn sum(&self, keep: impl Fn(Rule) -> bool) -> usize {
        self.rules
            .iter()
            .filter(|(rule, _)| keep(**rule))
            .map(|(_, n)| n)
            .sum()
    }

    /// Paths given a type (maps refusing unknown keys included).
    pub fn typed(&self) -> usize {
        self.sum(Rule::refuses)
    }

    /// Paths that accept any value, or any keys.
    pub fn open(&self) -> usize {
        self.sum(|rule| !rule.refuses())
    }

    /// One line per kind of rule, for the definition's status and `compositor crd`.
    pub fn lines(&self) -> Vec<String> {
        let source = if self.declared {
            "spec.schema.infer is Always, so the chart's values.schema.json is set aside"
        } else {
            "the chart has no values.schema.json"
        };
        let mut lines = vec![format!(
            "spec inferred from values.yaml ({source}); paths: {} typed, {} open",
            self.typed(),
            self.open()
        )];
        lines.push(match &self.root {
            Root::Closed => {
                "top level: unknown keys refused (set spec.schema.openKeys to keep a path open)"
                    .to_owned()
            }
            Root::Dynamic(file) => {
                format!("top level: unknown keys kept, since {file} reads .Values whole")
            }
            Root::Open => "top level: any keys, by spec.schema.openKeys".to_owned(),
        });
        lines.extend(self.rules.iter().map(|(rule, n)| rule.line(*n)));
        if !self.descriptions.is_empty() {
            let named: Vec<String> = self
                .descriptions
                .iter()
                .map(|(source, n)| {
                    let format = match source {
                        Source::ReadmeGenerator => "readme-generator (## @param)",
                        Source::HelmDocs => "helm-docs (# --)",
                        Source::Plain => "plain comments",
                    };
                    format!("{n} {format}")
                })
                .collect();
            lines.push(format!("descriptions: {}", named.join(", ")));
        }
        if !self.unmatched.is_empty() {
            lines.push(format!(
                "spec.schema.openKeys naming no values.yaml key: {}",
                self.unmatched.join(", ")
            ));
        }
        lines
    }
}
