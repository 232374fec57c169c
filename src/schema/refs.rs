//! `$ref` inlining: local JSON pointers, anchors and subchart schemas become plain subschemas.
//!
//! The apiserver has no `$ref`, so every reference is replaced by a copy of its target. Sibling
//! keywords of a `$ref` are kept (2019-09+ semantics) by wrapping both in an `allOf`, which the
//! converter merges later. A reference that points back into its own expansion is cut with an
//! empty schema (any value), which the converter turns into preserve-unknown-fields.

use serde_json::{Map, Value};

use super::keywords::{self, Position};
use super::warning::Warning;
use crate::chart::Package;

/// Caps how many references are expanded, so that a schema whose references fan out
/// exponentially cannot exhaust memory.
const MAX_EXPANSIONS: usize = 20_000;
/// Caps how many references may be open inside each other, so that a long chain of
/// references cannot nest the schema deeper than the converter's stack allows.
const MAX_NESTED_REFS: usize = 32;

/// A JSON document references can point into: the chart's schema or a subchart's.
struct Doc<'a> {
    root: &'a Value,
    package: &'a Package,
    /// `$id` of the document without fragment, to recognise absolute self references.
    id: Option<String>,
}

/// Inlines every `$ref` of one or more documents of a chart package.
pub(crate) struct Inliner<'a, 'w> {
    docs: Vec<Doc<'a>>,
    expansions: usize,
    warnings: &'w mut Vec<Warning>,
}

impl<'a, 'w> Inliner<'a, 'w> {
    /// An inliner that records what it could not resolve into `warnings`.
    pub(crate) fn new(warnings: &'w mut Vec<Warning>) -> Self {
        Self {
            docs: Vec::new(),
            expansions: 0,
            warnings,
        }
    }

    /// Returns `schema` (the root of a document of `package`) with every reference inlined.
    pub(crate) fn inline_document(
        &mut self,
        schema: &'a Value,
        package: &'a Package,
        path: &str,
    ) -> Value {
        let doc = self.add_doc(schema, package);
        self.inline(schema, doc, path, &mut Vec::new())
    }

    fn add_doc(&mut self, root: &'a Value, package: &'a Package) -> usize {
        if let Some(i) = self.docs.iter().position(|d| std::ptr::eq(d.root, root)) {
            return i;
        }
        let id = root
            .get("$id")
            .or_else(|| root.get("id"))
            .and_then(Value::as_str)
            .map(|s| s.split('#').next().unwrap_or_default().to_owned())
            .filter(|s| !s.is_empty());
        self.docs.push(Doc { root, package, id });
        self.docs.len() - 1
    }

    fn inline_keywords(
        &mut self,
        map: &Map<String, Value>,
        doc: usize,
        path: &str,
        stack: &mut Vec<(usize, String)>,
    ) -> Map<String, Value> {
        let mut out = Map::new();
        for (key, value) in map {
            if matches!(key.as_str(), "definitions" | "$defs") {
                continue;
            }
            let inlined = match keywords::position(key) {
                Position::Schema(step) => {
                    let p = keywords::step_path(path, step, None);
                    self.inline(value, doc, &p, stack)
                }
                Position::SchemaArray(step) => match value {
                    Value::Array(items) => Value::Array(
                        items
                            .iter()
                            .map(|v| {
                                let p = keywords::step_path(path, step, None);
                                self.inline(v, doc, &p, stack)
                            })
                            .collect(),
                    ),
                    other => self.inline(other, doc, &keywords::step_path(path, step, None), stack),
                },
                Position::SchemaMap(step) => match value {
                    Value::Object(entries) => Value::Object(
                        entries
                            .iter()
                            .map(|(name, v)| {
                                let p = keywords::step_path(path, step, Some(name));
                                (name.clone(), self.inline(v, doc, &p, stack))
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                },
                Position::Value => value.clone(),
            };
            out.insert(key.clone(), inlined);
        }
        out
    }

    /// Inlines one subschema (a document node or a copy of one).
    fn inline(
        &mut self,
        value: &Value,
        doc: usize,
        path: &str,
        stack: &mut Vec<(usize, String)>,
    ) -> Value {
        let Value::Object(map) = value else {
            return value.clone();
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            let target = self.expand(reference, doc, path, stack);
            let siblings: Map<String, Value> = map
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$ref" | "definitions" | "$defs"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if siblings.is_empty() {
                return target;
            }
            let siblings = self.inline_keywords(&siblings, doc, path, stack);
            return Value::Object(Map::from_iter([(
                "allOf".to_owned(),
                Value::Array(vec![Value::Object(siblings), target]),
            )]));
        }
        Value::Object(self.inline_keywords(map, doc, path, stack))
    }

    /// The inlined target of `reference`, or an empty schema (any value) with a warning.
    fn expand(
        &mut self,
        reference: &str,
        doc: usize,
        path: &str,
        stack: &mut Vec<(usize, String)>,
    ) -> Value {
        let Some((target_doc, pointer, target)) = self.resolve(reference, doc) else {
            self.warnings.push(Warning::new(
                path,
                "$ref",
                format!("reference {reference:?} cannot be resolved inside the chart; any value is accepted"),
            ));
            return Value::Object(Map::new());
        };
        let key = (target_doc, pointer);
        if stack.len() >= MAX_NESTED_REFS {
            self.warnings.push(Warning::new(
                path,
                "$ref",
                format!("reference {reference:?} not expanded: references nest too deeply; any value is accepted"),
            ));
            return Value::Object(Map::new());
        }
        if stack.contains(&key) {
            self.warnings.push(Warning::new(
                path,
                "$ref",
                format!("recursive reference {reference:?} cut here; any value is accepted below"),
            ));
            return Value::Object(Map::new());
        }
        self.expansions += 1;
        if self.expansions > MAX_EXPANSIONS {
            self.warnings.push(Warning::new(
                path,
                "$ref",
                format!("reference {reference:?} not expanded: the schema expands too many references; any value is accepted"),
            ));
            return Value::Object(Map::new());
        }
        stack.push(key);
        let inlined = self.inline(target, target_doc, path, stack);
        stack.pop();
        inlined
    }

    /// Finds the document and node `reference` points at, seen from document `doc`.
    fn resolve(&mut self, reference: &str, doc: usize) -> Option<(usize, String, &'a Value)> {
        let (base, fragment) = match reference.split_once('#') {
            Some((b, f)) => (b, f),
            None => (reference, ""),
        };
        let here = &self.docs[doc];
        let target_doc = if base.is_empty() || here.id.as_deref() == Some(base) {
            doc
        } else {
            let relative = base.trim_start_matches("./");
            if relative == "values.schema.json" {
                doc
            } else {
                let name = relative
                    .strip_prefix("charts/")?
                    .strip_suffix("/values.schema.json")?;
                let package = here.package;
                let sub = package.subcharts.iter().find(|s| s.metadata.name == name)?;
                let root = sub.schema.as_ref()?;
                self.add_doc(root, sub)
            }
        };
        let root = self.docs[target_doc].root;
        let fragment = percent_decode(fragment);
        let node = if fragment.is_empty() || fragment.starts_with('/') {
            root.pointer(&fragment)?
        } else {
            find_anchor(root, &fragment)?
        };
        Some((target_doc, fragment, node))
    }
}

/// Finds a subschema named by `$anchor` (2019-09+) or by a fragment-only `$id` (draft 6/7).
fn find_anchor<'v>(node: &'v Value, anchor: &str) -> Option<&'v Value> {
    match node {
        Value::Object(map) => {
            let named = map.get("$anchor").and_then(Value::as_str) == Some(anchor)
                || map
                    .get("$id")
                    .or_else(|| map.get("id"))
                    .and_then(Value::as_str)
                    .and_then(|id| id.strip_prefix('#'))
                    == Some(anchor);
            if named {
                return Some(node);
            }
            map.values().find_map(|v| find_anchor(v, anchor))
        }
        Value::Array(items) => items.iter().find_map(|v| find_anchor(v, anchor)),
        _ => None,
    }
}

/// Decodes `%XX` escapes of a URI fragment; anything malformed is kept as written.
fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_owned();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}
