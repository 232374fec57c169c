//! The Helm calls the profile times: offline ones, installs straight to the apiserver, the
//! post-render relay alone, and installs through the timing proxy.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use compositor::api::RELEASE_OWNER_LABEL;
use compositor::helm::{Engine, Gate, KubeContext, UpgradeOptions};
use compositor::runtime::Metrics;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::bench_support::proxy::CountingProxy;
use super::bench_support::{BedCpu, Error, TestBed, env};
use super::sampler::Sampler;
use super::timeline::{self, Part, Trace};

/// How long one Helm call may take.
const HELM_TIMEOUT: Duration = Duration::from_secs(120);

/// The median CPU (ms) of Helm and the processes it started, wall time (ms), and the mean CPU
/// (ms) of the apiserver and etcd meanwhile, of one call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub cpu: f64,
    pub wall: f64,
    pub server: f64,
}

pub struct Offline {
    pub version: Cost,
    pub show: Cost,
    pub template: Cost,
}

pub struct Direct {
    pub plain: Cost,
    /// `helm install --disable-openapi-validation`: without the OpenAPI documents Helm fetches
    /// and parses only to learn that the apiserver validates fields itself.
    pub unvalidated: Cost,
    pub gated: Cost,
    pub ungated: Cost,
}

pub struct Traced {
    pub plain: Vec<Part>,
    pub gated: Vec<Part>,
}

/// What every call shares.
pub struct Calls<'a> {
    bed: &'a TestBed,
    namespace: String,
    helm: PathBuf,
    engine: Engine,
    gate: Gate,
    admin: PathBuf,
    next: std::cell::Cell<usize>,
}

impl<'a> Calls<'a> {
    pub async fn new(bed: &'a TestBed) -> Result<Self, Error> {
        let helm = PathBuf::from(env("HELM_BIN")?);
        let engine = Engine::locate(
            Some(helm.clone()),
            HELM_TIMEOUT,
            Arc::new(Metrics::default()),
        )?;
        // Learns whether this is Helm 4 once, as the controller does at its first call.
        engine.version().await?;
        Ok(Calls {
            bed,
            namespace: bed.namespace("profile").await?,
            helm,
            engine,
            gate: Gate::start(bed.binary.clone())?,
            admin: PathBuf::from(env("KUBECONFIG")?),
            next: std::cell::Cell::new(0),
        })
    }

    pub async fn offline(&self, runs: usize) -> Result<Offline, Error> {
        let chart = self.bed.chart.to_str().ok_or("chart path is not UTF-8")?;
        let values = self.bed.scratch("values.json");
        std::fs::write(&values, values_of("app-0").to_string())?;
        let values = values.to_str().ok_or("scratch path is not UTF-8")?;
        let template = ["template", "app-0", chart, "--values", values];
        let show = ["show", "chart", chart];
        Ok(Offline {
            version: repeat(runs, || self.offline_helm(&["version"])).await?,
            show: repeat(runs, || self.offline_helm(&show)).await?,
            template: repeat(runs, || self.offline_helm(&template)).await?,
        })
    }

    async fn offline_helm(&self, args: &[&str]) -> Result<(), Error> {
        let home = self.bed.scratch("helm-offline");
        let status = tokio::process::Command::new(&self.helm)
            .args(args)
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdout(Stdio::null())
            .status()
            .await?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("helm {args:?} failed").into()),
        }
    }

    pub async fn direct(&self, runs: usize) -> Result<Direct, Error> {
        let admin = std::fs::read(&self.admin)?;
        Ok(Direct {
            plain: repeat(runs, || self.plain_install(&self.admin, &[])).await?,
            unvalidated: repeat(runs, || {
                self.plain_install(&self.admin, &["--disable-openapi-validation"])
            })
            .await?,
            gated: repeat(runs, || async {
                self.engine_install(&admin, true).await.map(drop)
            })
            .await?,
            ungated: repeat(runs, || async {
                self.engine_install(&admin, false).await.map(drop)
            })
            .await?,
        })
    }

    /// `helm install` as a person would run it, with the kubeconfig at `kubeconfig` and `flags`.
    async fn plain_install(
        &self,
        kubeconfig: &std::path::Path,
        flags: &[&str],
    ) -> Result<(), Error> {
        let name = self.release();
        let chart = self.bed.chart.to_str().ok_or("chart path is not UTF-8")?;
        let mut args = vec!["install", &name, chart, "--namespace", &self.namespace];
        args.extend(flags);
        self.bed.helm(kubeconfig, &args, &values_of(&name)).await
    }

    /// The controller's call, with the gate as post-renderer when `gated` (answered at once);
    /// when the manifest reached the gate.
    async fn engine_install(
        &self,
        kubeconfig: &[u8],
        gated: bool,
    ) -> Result<Option<Instant>, Error> {
        let name = self.release();
        let target = KubeContext::new(kubeconfig.to_vec(), &self.namespace);
        let mut ticket = self.gate.ticket();
        let options = UpgradeOptions {
            post_renderer: gated.then(|| ticket.renderer().clone()),
            labels: [(RELEASE_OWNER_LABEL.to_string(), "profile".to_string())].into(),
            ..Default::default()
        };
        let values = values_of(&name);
        let upgrade =
            self.engine
                .upgrade_install(&target, &name, &self.bed.chart, &values, options);
        let admission = async {
            if !gated {
                return None;
            }
            let request = ticket.request().await?;
            let arrived = Instant::now();
            request.answer(true);
            Some(arrived)
        };
        let (release, arrived) = tokio::join!(upgrade, admission);
        release?;
        Ok(arrived)
    }

    /// `compositor post-render` fed the chart's manifest, its ticket answered at once.
    pub async fn relay_alone(&self, runs: usize) -> Result<Cost, Error> {
        let manifest = self
            .engine
            .template(
                &self.bed.chart,
                "app-0",
                &self.namespace,
                &values_of("app-0"),
            )
            .await?;
        repeat(runs, || async {
            let mut ticket = self.gate.ticket();
            let renderer = ticket.renderer().clone();
            let mut child = tokio::process::Command::new(&renderer.command)
                .args(&renderer.args)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()?;
            let mut stdin = child.stdin.take().ok_or("no stdin")?;
            stdin.write_all(manifest.as_bytes()).await?;
            drop(stdin);
            if let Some(request) = ticket.request().await {
                request.answer(true);
            }
            match child.wait().await?.success() {
                true => Ok(()),
                false => Err("the relay failed".into()),
            }
        })
        .await
    }

    pub async fn traced(&self, runs: usize) -> Result<Traced, Error> {
        let proxy = CountingProxy::start(self.bed.client.clone()).await?;
        let kubeconfig = self.bed.scratch("proxy.kubeconfig");
        proxy.write_kubeconfig(&kubeconfig)?;
        let proxied = std::fs::read(&kubeconfig)?;
        let (mut plain, mut gated) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let plain_install = async { self.plain_install(&kubeconfig, &[]).await.map(|()| None) };
            let trace = self.trace(&proxy, plain_install).await?;
            plain.push(timeline::parts(&trace));
            let trace = self
                .trace(&proxy, self.engine_install(&proxied, true))
                .await?;
            gated.push(timeline::parts(&trace));
        }
        Ok(Traced {
            plain: timeline::median(&plain),
            gated: timeline::median(&gated),
        })
    }

    /// Runs `call` (one Helm process, through `proxy`) with its CPU sampled.
    async fn trace(
        &self,
        proxy: &CountingProxy,
        call: impl Future<Output = Result<Option<Instant>, Error>>,
    ) -> Result<Trace, Error> {
        proxy.take_exchanges();
        let sampler = Sampler::start("helm");
        let (spawned, children) = (Instant::now(), children_cpu_ms());
        let gate = call.await?;
        let exited = Instant::now();
        Ok(Trace {
            spawned,
            exited,
            gate,
            exchanges: proxy.take_exchanges(),
            cpu: sampler.finish(),
            total_cpu: children_cpu_ms() - children,
        })
    }

    fn release(&self) -> String {
        let next = self.next.get();
        self.next.set(next + 1);
        format!("app-{next}")
    }
}

/// The values every release gets, as the controller bench gives them.
fn values_of(name: &str) -> Value {
    json!({"git": {"repository": name}})
}

/// `call` run `runs` times in turn: the median CPU of this process's finished children and wall
/// time, and the mean CPU of the apiserver and etcd.
async fn repeat<F: Future<Output = Result<(), Error>>>(
    runs: usize,
    call: impl Fn() -> F,
) -> Result<Cost, Error> {
    let (mut cpu, mut wall, mut server) = (Vec::new(), Vec::new(), 0.0);
    for _ in 0..runs {
        let (children, bed, start) = (children_cpu_ms(), BedCpu::now()?, Instant::now());
        call().await?;
        wall.push(start.elapsed().as_secs_f64() * 1e3);
        cpu.push(children_cpu_ms() - children);
        let used = BedCpu::now()?.since(bed);
        server += (used.apiserver + used.etcd) * 1e3 / runs as f64;
    }
    Ok(Cost {
        cpu: median(cpu),
        wall: median(wall),
        server,
    })
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// CPU (ms) of this process's children that have finished and been waited for.
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}
