//! A Helm call is limited by what it needs, not by what its engine served before: every real
//! and published chart of `testdata/` renders 20 times in a row through the resident engine, as
//! a controller's calls would, and none runs out of the memory a call may take. The engines'
//! peak size is printed beside each chart's.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use compositor::helm::Engine;
use compositor::runtime::Metrics;
use serde_json::json;

/// Renders of each chart in a row.
const RENDERS: usize = 20;

/// Every packaged chart of `testdata/real-charts` and `testdata/published`.
fn charts() -> Vec<PathBuf> {
    let mut charts: Vec<PathBuf> = ["real-charts", "published"]
        .into_iter()
        .flat_map(|folder| std::fs::read_dir(support::testdata(folder)).expect("testdata"))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "tgz"))
        .collect();
    charts.sort();
    assert!(
        charts.len() >= 11,
        "the real charts are missing: {charts:?}"
    );
    charts
}

#[tokio::test]
async fn every_real_chart_renders_twenty_times_in_a_row_through_one_engine() {
    let engine = Engine::resident(
        support::env("HELM_ENGINE").into(),
        Duration::from_secs(120),
        Arc::new(Metrics::default()),
    );
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_engines(peak.clone(), done.clone()));
    let mut report = Vec::new();
    for chart in charts() {
        let name = chart.file_name().unwrap().to_string_lossy().into_owned();
        peak.store(0, Ordering::Relaxed);
        for render in 1..=RENDERS {
            let manifest = engine
                .template(&chart, "memory", "memory", &json!({}))
                .await
                .unwrap_or_else(|error| panic!("{name}, render {render}: {error}"));
            assert!(manifest.contains("kind:"), "{name} rendered nothing");
        }
        report.push(format!(
            "{name}: {RENDERS} renders, engines' peak resident size {} MiB",
            peak.load(Ordering::Relaxed) >> 20
        ));
    }
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    println!("{}", report.join("\n"));
}

/// Keeps in `peak` the largest resident size, summed over this process's engines, until `done`.
async fn sample_engines(peak: Arc<AtomicU64>, done: Arc<AtomicBool>) {
    while !done.load(Ordering::Relaxed) {
        let resident: u64 = support::child_processes("helm-engine")
            .iter()
            .filter_map(|pid| resident_size(pid))
            .sum();
        peak.fetch_max(resident, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `VmRSS` of process `pid`, in bytes.
fn resident_size(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    Some(line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()? << 10)
}
