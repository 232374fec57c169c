//! One Helm call's time, cut at its requests to the apiserver into parts.
//!
//! Each stretch of the call between two events (the spawn, a request sent, an answer received,
//! the manifest at the post-render gate, the exit) is one part: waiting for the apiserver while
//! a request is out (named by what the request was for), else Helm's own work, named by where
//! it falls: before its first request (the process start, command line and client set-up), up
//! to the gate (the render, with Helm's start of the post-renderer), from the gate to the next
//! request, after a request (named by that request: the work on its answer and what follows),
//! after its last answer; then the caller's part, from Helm's exit (within the sampler's
//! millisecond) until the call returns. What the sampler missed (the exit, the post-render relay, a process
//! of its own) is the difference to the CPU the processes reported when they were waited for.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::http::Method;

use super::bench_support::proxy::Exchange;
use super::calls::median as median_of;
use super::sampler::Samples;

/// One traced call.
pub struct Trace {
    pub spawned: Instant,
    pub exited: Instant,
    /// When the manifest reached the post-render gate, if the call had one.
    pub gate: Option<Instant>,
    pub exchanges: Vec<Exchange>,
    pub cpu: Samples,
    /// The CPU (ms) of Helm and the processes it started, as reported when it was waited for.
    pub total_cpu: f64,
}

/// One part of a call: Helm's CPU (ms) and the wall time (ms) in it.
#[derive(Clone, Debug)]
pub struct Part {
    pub name: String,
    pub cpu: f64,
    pub wall: f64,
}

/// The parts of `trace`, in the order they first happen.
pub fn parts(trace: &Trace) -> Vec<Part> {
    let mut events: Vec<Instant> = vec![trace.spawned, trace.exited];
    events.extend(trace.gate);
    events.extend(trace.cpu.last_seen());
    for exchange in &trace.exchanges {
        events.extend([exchange.started, exchange.answered]);
    }
    events.sort();
    let mut parts: Vec<Part> = Vec::new();
    for pair in events.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        if to <= from {
            continue;
        }
        let name = name_of(trace, from, to);
        let wall = (to - from).as_secs_f64() * 1e3;
        let cpu = trace.cpu.at(to) - trace.cpu.at(from);
        match parts.iter_mut().find(|part| part.name == name) {
            Some(part) => {
                part.cpu += cpu;
                part.wall += wall;
            }
            None => parts.push(Part { name, cpu, wall }),
        }
    }
    parts.push(Part {
        name: "not sampled: Helm's exit, the post-render relay".to_string(),
        cpu: (trace.total_cpu - trace.cpu.last()).max(0.0),
        wall: 0.0,
    });
    parts
}

/// What the stretch from `from` to `to` was.
fn name_of(trace: &Trace, from: Instant, to: Instant) -> String {
    let out = trace
        .exchanges
        .iter()
        .find(|e| e.started <= from && e.answered >= to);
    if let Some(exchange) = out {
        return format!("apiserver: {}", kind(exchange));
    }
    if trace.cpu.last_seen().is_some_and(|gone| from >= gone) {
        return "after Helm's exit: the caller reaps it and reads its output".to_string();
    }
    let first = trace.exchanges.first().map(|e| e.started);
    if first.is_none_or(|first| to <= first) {
        return "Helm: process start, command line, client set-up".to_string();
    }
    match trace.gate {
        Some(gate) if to == gate => return "Helm: render, starting the post-renderer".to_string(),
        Some(gate) if from == gate => return "Helm: post-renderer's answer, manifest parse".into(),
        _ => {}
    }
    let next = trace.exchanges.iter().find(|e| e.started >= to);
    let previous = trace.exchanges.iter().rev().find(|e| e.answered <= from);
    match (previous, next) {
        (Some(previous), Some(_)) => format!("Helm: after {}", kind(previous)),
        _ => "Helm: after its last request (output, exit)".to_string(),
    }
}

/// Helm fetches (and parses) the OpenAPI document of each group version it writes, only to learn
/// whether the apiserver validates fields itself; when it does, Helm validates nothing on its
/// side (`--disable-openapi-validation` skips both).
const OPENAPI: &str = "OpenAPI documents (field validation support check)";

/// What a request was for.
fn kind(exchange: &Exchange) -> &'static str {
    let path = exchange.path.as_str();
    let segments = path.trim_matches('/').split('/').count();
    if path.starts_with("/openapi") {
        return OPENAPI;
    }
    let discovery = path == "/version"
        || (path.starts_with("/api") && !path.contains("/namespaces/") && segments <= 3);
    if discovery {
        return "discovery";
    }
    match (path.contains("/secrets"), &exchange.method) {
        (true, &Method::GET) => "release record reads",
        (true, _) => "release record writes",
        (false, &Method::GET) => "object reads (conflict check)",
        (false, &Method::PATCH) => "server-side apply",
        (false, _) => "other writes",
    }
}

/// The median of each part over `runs`, in the order of the first run (a part missing from a run
/// counts as 0).
pub fn median(runs: &[Vec<Part>]) -> Vec<Part> {
    let mut names: Vec<String> = Vec::new();
    for run in runs {
        for part in run {
            if !names.contains(&part.name) {
                names.push(part.name.clone());
            }
        }
    }
    let mut values: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for name in &names {
        let entry = values.entry(name).or_default();
        for run in runs {
            let part = run.iter().find(|part| &part.name == name);
            entry.0.push(part.map_or(0.0, |part| part.cpu));
            entry.1.push(part.map_or(0.0, |part| part.wall));
        }
    }
    names
        .iter()
        .map(|name| {
            let (cpu, wall) = values.remove(name.as_str()).unwrap_or_default();
            Part {
                name: name.clone(),
                cpu: median_of(cpu),
                wall: median_of(wall),
            }
        })
        .collect()
}
