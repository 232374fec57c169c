//! Descriptions of values.yaml keys, from the comments charts really write.
//!
//! Three formats, tried in this order for each key:
//! - bitnami's readme-generator: `## @param path [modifiers] text`, anywhere in the file, naming
//!   the key by its full dotted path;
//! - helm-docs: a `# -- text` block right above the key, continued by the comment lines below
//!   it, with an optional `(type)` first and `# @default -- text` for a default shown instead;
//! - plain comments: the comment block right above the key, without the lines that are
//!   commented-out YAML.
//!
//! The file is read line by line, not parsed: comments are not part of YAML's data model, and
//! a line scanner that tracks indentation finds the key each block sits on.

use std::collections::BTreeMap;

/// Which comment format a description came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Source {
    /// `## @param path text` (bitnami's readme-generator).
    ReadmeGenerator,
    /// `# -- text` (helm-docs).
    HelmDocs,
    /// The comment block above the key.
    Plain,
}

/// What the comments say about one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Comment {
    /// The description, lines joined.
    pub text: String,
    /// Its format.
    pub source: Source,
    /// A type the comment names (helm-docs `(string)`, readme-generator `[array]`), for keys
    /// whose default (`null`) says nothing.
    pub hint: Option<&'static str>,
}

/// Descriptions by dotted path (`image.tag`), `prefix` (ending in `.`, or empty) put before
/// every path; keys inside lists are not described.
pub(crate) fn descriptions(text: &str, prefix: &str) -> BTreeMap<String, Comment> {
    let mut out = BTreeMap::new();
    let mut params = BTreeMap::new();
    let mut block: Vec<&str> = Vec::new();
    // (indent, key) of the mappings the current line is inside; `None` for a list item.
    let mut stack: Vec<(usize, Option<String>)> = Vec::new();
    let mut block_scalar: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if let Some(at) = block_scalar {
            if trimmed.is_empty() || indent > at {
                continue;
            }
            block_scalar = None;
        }
        if trimmed.is_empty() {
            block.clear();
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            if let Some((path, comment)) = param(comment) {
                params.insert(path, comment);
            }
            block.push(comment);
            continue;
        }
        while stack.last().is_some_and(|(at, _)| *at >= indent) {
            stack.pop();
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            stack.push((indent, None));
            block.clear();
            continue;
        }
        let Some((key, rest)) = key_of(trimmed) else {
            block.clear();
            continue;
        };
        if rest.starts_with('|') || rest.starts_with('>') {
            block_scalar = Some(indent);
        }
        let in_list = stack.iter().any(|(_, k)| k.is_none());
        let mut path: Vec<&str> = stack.iter().filter_map(|(_, k)| k.as_deref()).collect();
        path.push(&key);
        let dotted = format!("{prefix}{}", path.join("."));
        let inline = rest.split_once(" #").map(|(_, c)| c);
        if !in_list && let Some(comment) = described(&block, inline) {
            out.insert(dotted, comment);
        }
        stack.push((indent, Some(key.clone())));
        block.clear();
    }
    for (path, comment) in params {
        out.insert(format!("{prefix}{path}"), comment);
    }
    out
}

/// `(key, rest of the line)` when the line starts a mapping entry.
fn key_of(line: &str) -> Option<(String, &str)> {
    let (key, rest) = if let Some(quoted) = line.strip_prefix('"') {
        let (key, rest) = quoted.split_once('"')?;
        (key, rest.strip_prefix(':')?)
    } else if let Some(quoted) = line.strip_prefix('\'') {
        let (key, rest) = quoted.split_once('\'')?;
        (key, rest.strip_prefix(':')?)
    } else {
        let end = line
            .find(": ")
            .or_else(|| line.ends_with(':').then(|| line.len() - 1))?;
        (&line[..end], &line[end + 1..])
    };
    let key = key.trim();
    let flow = key.starts_with(['{', '[', '&', '*', '!']) || key.contains(" #");
    (!key.is_empty() && !flow).then(|| (key.to_owned(), rest.trim()))
}

/// `## @param path [modifiers] text` → `(path, comment)`.
fn param(comment: &str) -> Option<(String, Comment)> {
    let rest = comment.trim_start_matches('#').trim_start();
    let rest = rest.strip_prefix("@param ")?.trim_start();
    let (path, mut text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    text = text.trim();
    let mut hint = None;
    if let Some(inner) = text.strip_prefix('[')
        && let Some((modifiers, after)) = inner.split_once(']')
    {
        hint = modifiers.split(',').find_map(|m| type_named(m.trim()));
        text = after.trim();
    }
    Some((
        path.to_owned(),
        Comment {
            text: text.to_owned(),
            source: Source::ReadmeGenerator,
            hint,
        },
    ))
}

/// The description a comment block (and an inline comment) gives the key below it.
fn described(block: &[&str], inline: Option<&str>) -> Option<Comment> {
    if let Some(start) = block
        .iter()
        .rposition(|l| l.trim_start().starts_with("-- "))
    {
        return Some(helm_docs(&block[start..]));
    }
    if let Some(inline) = inline.map(str::trim).and_then(|c| c.strip_prefix("-- ")) {
        return Some(helm_docs(&[inline]));
    }
    let lines: Vec<&str> = block
        .iter()
        .map(|l| l.trim_start_matches('#').trim())
        .filter(|l| !l.is_empty() && !l.starts_with('@') && !looks_like_yaml(l))
        .collect();
    (!lines.is_empty()).then(|| Comment {
        text: lines.join(" "),
        source: Source::Plain,
        hint: None,
    })
}

/// A helm-docs block: `-- (type) text`, continuation lines, `@default -- text`.
fn helm_docs(block: &[&str]) -> Comment {
    let mut lines = block.iter().map(|l| l.trim());
    let first = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("-- ")
        .trim();
    let (hint, first) = match first.strip_prefix('(').and_then(|r| r.split_once(')')) {
        Some((named, rest)) => (type_named(named), rest.trim()),
        None => (None, first),
    };
    let mut text = vec![first.to_owned()];
    for line in lines {
        let line = line.trim_start_matches('#').trim();
        if let Some(default) = line.strip_prefix("@default -- ") {
            text.push(format!("(default: {default})"));
        } else if !line.starts_with('@') && !line.is_empty() {
            text.push(line.to_owned());
        }
    }
    Comment {
        text: text.join(" ").trim().to_owned(),
        source: Source::HelmDocs,
        hint,
    }
}

/// The JSON Schema type a comment's type name stands for.
fn type_named(name: &str) -> Option<&'static str> {
    let name = name.rsplit('/').next().unwrap_or(name);
    Some(match name {
        "string" => "string",
        "int" | "integer" => "integer",
        "float" | "number" => "number",
        "bool" | "boolean" => "boolean",
        "object" | "dict" | "map" => "object",
        "list" | "array" => "array",
        _ => return None,
    })
}

/// Whether a comment line is commented-out YAML (`# key: value`, `# - item`) rather than prose.
fn looks_like_yaml(line: &str) -> bool {
    if line.starts_with("- ") || line == "-" || line.starts_with('{') {
        return true;
    }
    match key_of(line) {
        Some((key, _)) => !key.contains(' '),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(map: &BTreeMap<String, Comment>, path: &str) -> String {
        map.get(path).map(|c| c.text.clone()).unwrap_or_default()
    }

    #[test]
    fn helm_docs_blocks_with_type_and_default() {
        let yaml = "# Default values.\n\nimage:\n  # -- Image repository\n  # for the container.\n  repository: nginx\n  # -- (string) Tag; the app version when unset.\n  # @default -- `.Chart.AppVersion`\n  tag:\n";
        let map = descriptions(yaml, "");
        assert_eq!(
            text(&map, "image.repository"),
            "Image repository for the container."
        );
        let tag = &map["image.tag"];
        assert_eq!(
            tag.text,
            "Tag; the app version when unset. (default: `.Chart.AppVersion`)"
        );
        assert_eq!((tag.source, tag.hint), (Source::HelmDocs, Some("string")));
        assert!(!map.contains_key("image"));
    }

    #[test]
    fn readme_generator_params_name_their_paths() {
        let yaml = "## @section Global\n## @param global.imageRegistry Global registry\n## @param global.pullSecrets [array] Secrets\n##\nglobal:\n  imageRegistry: \"\"\n  pullSecrets: []\n";
        let map = descriptions(yaml, "sub.");
        assert_eq!(text(&map, "sub.global.imageRegistry"), "Global registry");
        let secrets = &map["sub.global.pullSecrets"];
        assert_eq!(
            (secrets.source, secrets.hint),
            (Source::ReadmeGenerator, Some("array"))
        );
    }

    #[test]
    fn plain_comments_skip_commented_out_yaml_lists_and_block_scalars() {
        let yaml = "# How many pods.\n# replicas: 3\nreplicas: 1\n\n# Not mine.\n\nlabels: {}\nconfig: |\n  # inside: text\n  key: value\nitems:\n  # An item.\n  - name: a\n    # Its port.\n    port: 80\nafter: true\n";
        let map = descriptions(yaml, "");
        assert_eq!(text(&map, "replicas"), "How many pods.");
        assert!(!map.contains_key("labels"));
        assert!(!map.contains_key("config.key"));
        assert!(!map.contains_key("items.port"));
        assert!(!map.contains_key("after"));
    }

    #[test]
    fn inline_helm_docs_comments_count() {
        let map = descriptions("enabled: true  # -- Turn it on.\n", "");
        assert_eq!(text(&map, "enabled"), "Turn it on.");
    }
}
