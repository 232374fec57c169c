//! The corpus of real chart schemas as read from `testdata/`, for the tests that use it and
//! `examples/convert_bench.rs` alike (`testdata/corpus/SOURCES.md` says where each chart is from).

use std::io::Read;
use std::path::Path;

use compositor::chart::{ChartMetadata, Package};
use serde_json::Value;

/// The files read of each chart, as written.
const FILES: [&str; 3] = ["Chart.yaml", "values.yaml", "values.schema.json"];

/// One chart of the corpus.
pub struct CorpusChart {
    /// The folder's name, or the archive's without `.tgz`.
    pub name: String,
    /// The size of values.schema.json as written.
    pub schema_bytes: usize,
    /// Chart.yaml, values.yaml and the schema; no templates, no subcharts.
    pub package: Package,
}

/// Every chart of the corpus, by name: each folder of `corpus` (`testdata/corpus`), and each
/// chart of `published` (`testdata/published`) that has a values.schema.json, read from its
/// archive (so that no chart is kept twice).
pub fn read(corpus: &Path, published: &Path) -> Result<Vec<CorpusChart>, String> {
    let mut charts = Vec::new();
    for path in entries(corpus)? {
        if path.is_dir() {
            let texts = FILES.map(|file| {
                std::fs::read_to_string(path.join(file))
                    .map_err(|e| format!("{}: {e}", path.join(file).display()))
            });
            let [chart, values, schema] = texts;
            charts.push(chart_of(&path, [chart?, values?, schema?])?);
        }
    }
    for path in entries(published)? {
        if path.extension().is_some_and(|e| e == "tgz")
            && let Some(texts) = archived(&path)?
        {
            charts.push(chart_of(&path, texts)?);
        }
    }
    charts.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(charts)
}

/// The paths in `dir`.
fn entries(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    read.map(|entry| {
        entry
            .map(|e| e.path())
            .map_err(|e| format!("{}: {e}", dir.display()))
    })
    .collect()
}

/// The chart's own files from a packaged chart (those at the top of its chart folder, not its
/// subcharts'); `None` when it has no values.schema.json.
fn archived(path: &Path) -> Result<Option<[String; 3]>, String> {
    let error = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(error)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut texts: [Option<String>; 3] = Default::default();
    for entry in archive.entries().map_err(error)? {
        let mut entry = entry.map_err(error)?;
        let name = entry.path().map_err(error)?.into_owned();
        let mut parts = name.iter();
        let (Some(_chart), Some(file), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let Some(i) = FILES.iter().position(|f| file == *f) {
            let mut text = String::new();
            entry.read_to_string(&mut text).map_err(error)?;
            texts[i] = Some(text);
        }
    }
    match texts {
        [Some(chart), Some(values), Some(schema)] => Ok(Some([chart, values, schema])),
        [_, _, None] => Ok(None),
        _ => Err(format!(
            "{}: no Chart.yaml or values.yaml beside values.schema.json",
            path.display()
        )),
    }
}

/// A chart of the corpus from its Chart.yaml, values.yaml and values.schema.json.
fn chart_of(path: &Path, [chart, values_text, schema]: [String; 3]) -> Result<CorpusChart, String> {
    let error = |file: &str, e: String| format!("{} ({file}): {e}", path.display());
    let metadata: ChartMetadata =
        serde_saphyr::from_str(&chart).map_err(|e| error("Chart.yaml", e.to_string()))?;
    let values: Value =
        serde_saphyr::from_str(&values_text).map_err(|e| error("values.yaml", e.to_string()))?;
    let parsed: Value =
        serde_json::from_str(&schema).map_err(|e| error("values.schema.json", e.to_string()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".tgz").to_owned())
        .unwrap_or_default();
    Ok(CorpusChart {
        name,
        schema_bytes: schema.len(),
        package: Package {
            metadata,
            values,
            values_text,
            schema: Some(parsed),
            templates: Vec::new(),
            subcharts: Vec::new(),
        },
    })
}
