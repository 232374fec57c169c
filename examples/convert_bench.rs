//! Conversion time and CRD size for the corpus of real chart schemas.
//!
//! `cargo run --release --example convert_bench` prints one row per chart (schema size, CRD
//! size, warnings by keyword, conversion time), then the time of the largest schema and of all
//! of them together; `-- --warnings` also lists every warning on stderr. The corpus is the one the
//! tests read (`testdata/corpus/SOURCES.md`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use compositor::chart::Package;
use compositor::crd::{self, BuildOptions};
use compositor::schema::{self, ConvertOptions};

#[path = "../tests/corpus_support/charts.rs"]
mod corpus;

/// Conversions per schema; the mean is reported.
const ROUNDS: u32 = 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let charts: Vec<(String, usize, Package)> =
        corpus::read(&testdata.join("corpus"), &testdata.join("published"))?
            .into_iter()
            .map(|c| (c.name, c.schema_bytes, c.package))
            .collect();

    println!(
        "| chart | schema | CRD (YAML) | warnings by keyword | defaults dropped with applyDefaults | conversion |"
    );
    println!("|---|---|---|---|---|---|");
    let mut times = Vec::new();
    for (name, schema_bytes, package) in &charts {
        let values_schema = package.schema.as_ref().ok_or("no schema")?;
        let options = ConvertOptions::default();
        let start = Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(schema::convert(values_schema, package, &options));
        }
        let each = start.elapsed() / ROUNDS;
        times.push((*schema_bytes, each));
        let build = BuildOptions {
            version_name: Some("v1".to_owned()),
            ..Default::default()
        };
        let (crd, notes) = crd::build(package, &build)?;
        let warnings = notes.warnings;
        let yaml = crd::to_yaml(&crd)?;
        let mut by_keyword: BTreeMap<&str, usize> = BTreeMap::new();
        for w in &warnings {
            *by_keyword.entry(w.keyword.as_str()).or_default() += 1;
        }
        if std::env::args().any(|a| a == "--warnings") {
            for w in &warnings {
                eprintln!("{name}: {w}");
            }
        }
        let applied = ConvertOptions {
            apply_defaults: true,
            ..ConvertOptions::default()
        };
        let (_, with_defaults) = schema::convert(values_schema, package, &applied);
        let dropped_defaults = with_defaults
            .iter()
            .filter(|w| w.keyword == "default")
            .count();
        let summary: Vec<String> = by_keyword.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "| {name} | {:.1} KiB | {:.1} KiB | {} ({}) | {dropped_defaults} | {:.2} ms |",
            *schema_bytes as f64 / 1024.0,
            yaml.len() as f64 / 1024.0,
            warnings.len(),
            if summary.is_empty() {
                "-".to_owned()
            } else {
                summary.join(", ")
            },
            ms(each),
        );
    }
    let largest = times
        .iter()
        .max_by_key(|(bytes, _)| *bytes)
        .ok_or("empty corpus")?;
    let start = Instant::now();
    for _ in 0..ROUNDS {
        for (_, _, package) in &charts {
            if let Some(s) = &package.schema {
                std::hint::black_box(schema::convert(s, package, &ConvertOptions::default()));
            }
        }
    }
    let all = start.elapsed() / ROUNDS;
    println!();
    println!(
        "largest schema ({:.1} KiB): {:.2} ms per conversion",
        largest.0 as f64 / 1024.0,
        ms(largest.1)
    );
    println!("all {} schemas together: {:.2} ms", charts.len(), ms(all));
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
