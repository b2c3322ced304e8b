//! `poolwright doctor`: what a bastion needs before the daemon can be trusted
//! with it, checked the way the daemon will meet it. The desired state loads;
//! each provider answers a describe of its pools with the credentials in
//! force; each cluster's kubeconfig is a regular file and its API server
//! answers; the state directory is the user's own and closed to others; the
//! systemd unit keeps its hardening; the listener's address is free or held
//! by a poolwright daemon; the control socket's group exists and owns it.
//! Nothing is changed: it only reads, observes and connects.

mod unit;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{Output, exit};
use crate::clock::{Clock, SystemClock};
use crate::provider::Providers;
use crate::spec::types::ProviderSpec;
use crate::spec::{Config, Limits};

/// How long one provider or cluster may take to answer.
const BACKEND_DEADLINE: Duration = Duration::from_secs(30);

/// Where systemd looks for the unit, in its order of precedence.
const UNIT_PATHS: &[&str] = &[
    "/etc/systemd/system/poolwright.service",
    "/usr/local/lib/systemd/system/poolwright.service",
    "/usr/lib/systemd/system/poolwright.service",
    "/lib/systemd/system/poolwright.service",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub verdict: Verdict,
    pub topic: String,
    pub text: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn new(verdict: Verdict, topic: impl Into<String>, text: String, fix: Option<&str>) -> Finding {
        Finding {
            verdict,
            topic: topic.into(),
            text,
            fix: fix.map(str::to_string),
        }
    }
}

/// What `doctor` is asked to look at.
pub struct Request {
    pub dir: PathBuf,
    pub state_dir: PathBuf,
    pub unit: Option<PathBuf>,
    pub listen: std::net::SocketAddr,
    pub control_group: Option<String>,
    pub output: Output,
}

pub(super) fn doctor(req: &Request) -> anyhow::Result<u8> {
    let mut found = Vec::new();
    // One runtime for every check that connects.
    let rt = super::snapshot::runtime()?;
    let config = desired_state(&req.dir, &mut found);
    if let Some(config) = &config {
        found.extend(rt.block_on(backends(config, &req.state_dir)));
    }
    state_dir(&req.state_dir, &mut found);
    found.push(serves(&req.state_dir, &req.dir));
    systemd_unit(req.unit.as_deref(), &mut found);
    found.push(rt.block_on(listener(req.listen, &req.state_dir)));
    if let Some(group) = &req.control_group {
        found.push(control_group(group, &req.state_dir));
    }
    let failed = found.iter().filter(|f| f.verdict == Verdict::Fail).count();
    let warned = found.iter().filter(|f| f.verdict == Verdict::Warn).count();
    match req.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "formatVersion": 1,
                "findings": found,
                "failed": failed,
                "warnings": warned,
            }))?
        ),
        Output::Text => {
            let width = found.iter().map(|f| f.topic.len()).max().unwrap_or(0);
            for f in &found {
                let tag = match f.verdict {
                    Verdict::Ok => "ok  ",
                    Verdict::Warn => "warn",
                    Verdict::Fail => "FAIL",
                };
                println!("{tag}  {:<width$}  {}", f.topic, f.text);
                if let Some(fix) = &f.fix {
                    println!("      {:<width$}  fix: {fix}", "");
                }
            }
            println!(
                "\n{} check(s): {failed} failed, {warned} warning(s)",
                found.len()
            );
        }
    }
    Ok(if failed > 0 { exit::FAILED } else { exit::OK })
}

fn desired_state(dir: &Path, found: &mut Vec<Finding>) -> Option<Config> {
    let report = crate::desired_dir::load_dir(dir, &Limits::default());
    let topic = "desired state";
    match report.config {
        Some(c) => {
            found.push(Finding::new(
                Verdict::Ok,
                topic,
                format!(
                    "{} loads: {} pool(s), {} provider(s), {} cluster(s)",
                    dir.display(),
                    c.pools.len(),
                    c.providers.len(),
                    c.clusters.len()
                ),
                None,
            ));
            Some(c)
        }
        None if !dir.exists() => {
            found.push(Finding::new(
                Verdict::Fail,
                topic,
                format!("nothing at {}: no desired state to load", dir.display()),
                Some(&format!(
                    "clone your config repository to {}, or (for the service) set POOLWRIGHT_CONFIG in /etc/default/poolwright to where it is, then `sudo systemctl restart poolwright`",
                    dir.display()
                )),
            ));
            None
        }
        None => {
            let errors: Vec<String> = report.errors().map(|d| d.to_string()).collect();
            found.push(Finding::new(
                Verdict::Fail,
                topic,
                format!(
                    "{} is invalid: {} error(s), the first: {}",
                    dir.display(),
                    errors.len(),
                    errors.first().map_or("-", String::as_str)
                ),
                Some(&format!("poolwright validate {}", dir.display())),
            ));
            None
        }
    }
}

/// Each provider describes the pools that use it, as `plan` does, and
/// each cluster's API server is asked who it is and for a node.
async fn backends(config: &Config, state_dir: &Path) -> Vec<Finding> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let providers = Providers::build(config, state_dir, clock.clone());
    let mut out = Vec::new();
    for (name, entry) in &config.providers {
        let topic = format!("provider {name}");
        let names: Vec<String> = config
            .pools
            .iter()
            .filter(|(_, p)| p.doc.spec.provider_ref.value == *name)
            .map(|(n, _)| n.clone())
            .collect();
        let kind = match &entry.doc.spec.value {
            ProviderSpec::Sim(_) => "the embedded simulator",
            ProviderSpec::Aws(_) => "AWS (the standard credential chain)",
            ProviderSpec::Http(_) => "an HTTP plug-in",
        };
        if let Some(e) = providers.failed.get(name) {
            out.push(Finding::new(
                Verdict::Fail,
                topic,
                format!("{kind}: {e}"),
                None,
            ));
            continue;
        }
        if names.is_empty() {
            out.push(Finding::new(
                Verdict::Warn,
                topic,
                format!("{kind}: no pool uses it, so it was not asked"),
                None,
            ));
            continue;
        }
        let seen = tokio::time::timeout(
            BACKEND_DEADLINE,
            crate::reconcile::observe::observe_pools(
                config,
                name,
                &names,
                &providers,
                clock.as_ref(),
            ),
        )
        .await;
        let Ok(seen) = seen else {
            out.push(Finding::new(
                Verdict::Fail,
                topic,
                format!(
                    "{kind}: no answer within {}s to a describe of {} pool(s)",
                    BACKEND_DEADLINE.as_secs(),
                    names.len()
                ),
                Some("check the endpoint, the network path and the provider's timeouts"),
            ));
            continue;
        };
        match seen.unreachable.get(name) {
            Some(e) => out.push(Finding::new(
                Verdict::Fail,
                topic,
                format!("{kind}: describing {} pool(s) failed: {e}", names.len()),
                Some(match &entry.doc.spec.value {
                    ProviderSpec::Aws(_) => {
                        "check the credentials the daemon's user sees (AWS_PROFILE, AWS_CONFIG_FILE, the instance role) and the region"
                    }
                    _ => "check the plug-in's URL, token and TLS settings (`poolwright plugin check URL`)",
                }),
            )),
            None => out.push(Finding::new(
                Verdict::Ok,
                topic,
                format!(
                    "{kind}: answered for {} pool(s), {} of them exist",
                    names.len(),
                    seen.pools.len()
                ),
                None,
            )),
        }
    }
    for (name, entry) in &config.clusters {
        out.push(cluster(name, entry).await);
    }
    out
}

/// Connect as the daemon will, then ask the API server for its version and
/// for one Node (what cordon, drain and Ready need to read).
async fn cluster(
    name: &str,
    entry: &crate::spec::validate::Entry<crate::spec::types::ClusterDoc>,
) -> Finding {
    let topic = format!("cluster {name}");
    let base = Path::new(&entry.file).parent().unwrap_or(Path::new("."));
    let fix = Some(
        "check the kubeconfig, its context, and that the API server is reachable from here as the daemon's user",
    );
    let asked = tokio::time::timeout(BACKEND_DEADLINE, async {
        let c = crate::kube::Cluster::connect(name, &entry.doc.spec.value, base).await?;
        let version = c.client.apiserver_version().await?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
        nodes
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .map_err(|e| anyhow::anyhow!("listing Nodes: {e}"))?;
        anyhow::Ok(version.git_version)
    })
    .await;
    match asked {
        Ok(Ok(version)) => Finding::new(
            Verdict::Ok,
            topic,
            format!("API server {version} answered, and Nodes can be listed"),
            None,
        ),
        Ok(Err(e)) => Finding::new(Verdict::Fail, topic, format!("{e:#}"), fix),
        Err(_) => Finding::new(
            Verdict::Fail,
            topic,
            format!("no answer within {}s", BACKEND_DEADLINE.as_secs()),
            fix,
        ),
    }
}

/// Whether the state directory serves this desired state (or none yet),
/// by the rule plan, apply and run follow (`store::serves::check`).
fn serves(state: &Path, dir: &Path) -> Finding {
    use crate::store::serves::{ClaimError, Served, check};
    let topic = "state directory serves";
    let ours = Served::dir(dir);
    match check(state, &ours) {
        Ok(()) => Finding::new(
            Verdict::Ok,
            topic,
            format!(
                "{} serves {} (or nothing yet: the first apply or run records it)",
                state.display(),
                ours.desired
            ),
            None,
        ),
        // A warning: the daemon may serve a config repository (--git-url)
        // that doctor was not given.
        Err(ClaimError::Another(e)) => Finding::new(Verdict::Warn, topic, e.to_string(), None),
        Err(e) => Finding::new(Verdict::Fail, topic, e.to_string(), None),
    }
}

fn state_dir(dir: &Path, found: &mut Vec<Finding>) {
    let topic = "state directory";
    let meta = match dir.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            found.push(Finding::new(
                Verdict::Warn,
                topic,
                format!(
                    "{} does not exist yet; apply or run creates it",
                    dir.display()
                ),
                None,
            ));
            return;
        }
        Err(e) => {
            found.push(Finding::new(
                Verdict::Fail,
                topic,
                format!("{}: {e}", dir.display()),
                None,
            ));
            return;
        }
    };
    if !meta.is_dir() {
        found.push(Finding::new(
            Verdict::Fail,
            topic,
            format!(
                "{} is {}, not a directory",
                dir.display(),
                crate::files::kind_of(&meta)
            ),
            None,
        ));
        return;
    }
    let mode = meta.permissions().mode() & 0o7777;
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        found.push(Finding::new(
            Verdict::Warn,
            topic,
            format!(
                "{} belongs to uid {}, not to this user (uid {me}): run doctor as the daemon's user",
                dir.display(),
                meta.uid()
            ),
            None,
        ));
    }
    let verdict = if mode & 0o022 != 0 {
        Verdict::Fail
    } else if mode & 0o007 != 0 {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    found.push(Finding::new(
        verdict,
        topic,
        match verdict {
            Verdict::Fail => format!(
                "{} is mode {mode:04o}: others can write into it (plant a journal, a lock, a socket)",
                dir.display()
            ),
            Verdict::Warn => format!(
                "{} is mode {mode:04o}: every user can look into it",
                dir.display()
            ),
            Verdict::Ok => format!("{} is mode {mode:04o}", dir.display()),
        },
        (verdict != Verdict::Ok).then_some("chmod 0750 (the control group may enter) or 0700"),
    ));
    // Files the daemon wrote stay the daemon's: UMask=0077 makes them 0600.
    let mut open: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name() != "control.sock")
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            (m.is_file() && m.permissions().mode() & 0o077 != 0).then(|| {
                format!(
                    "{} ({:04o})",
                    e.file_name().to_string_lossy(),
                    m.permissions().mode() & 0o7777
                )
            })
        })
        .collect();
    open.sort();
    if !open.is_empty() {
        found.push(Finding::new(
            Verdict::Warn,
            topic,
            format!("readable by others than its owner: {}", open.join(", ")),
            Some("chmod 0600 them; under systemd, UMask=0077 keeps new ones so"),
        ));
    }
}

fn systemd_unit(given: Option<&Path>, found: &mut Vec<Finding>) {
    let path = match given {
        Some(p) => Some(p.to_path_buf()),
        None => UNIT_PATHS.iter().map(PathBuf::from).find(|p| p.exists()),
    };
    let Some(path) = path else {
        found.push(Finding::new(
            Verdict::Warn,
            "systemd unit",
            format!(
                "no poolwright.service installed (looked in {}); fine for a laptop, not for a bastion",
                UNIT_PATHS.join(", ")
            ),
            Some("install systemd/poolwright.service, or the .deb"),
        ));
        return;
    };
    let read = |p: &Path| crate::files::read_regular_text(p, 1 << 20);
    let text = match read(&path) {
        Ok(t) => t,
        Err(e) => {
            found.push(Finding::new(
                Verdict::Fail,
                "systemd unit",
                format!("{}: {e}", path.display()),
                None,
            ));
            return;
        }
    };
    // Drop-ins are read after the unit, in the order of their names.
    let mut drop_ins: Vec<PathBuf> = std::fs::read_dir(format!(
        "/etc/systemd/system/{}.d",
        path.file_name().unwrap_or_default().to_string_lossy()
    ))
    .into_iter()
    .flatten()
    .flatten()
    .map(|e| e.path())
    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
    .collect();
    drop_ins.sort();
    let extra: Vec<String> = drop_ins.iter().filter_map(|p| read(p).ok()).collect();
    let settings = unit::service_settings(
        std::iter::once(text.as_str()).chain(extra.iter().map(String::as_str)),
    );
    found.extend(unit::check(&path.display().to_string(), &settings));
    if let Some(exec) = settings.get("ExecStart") {
        let bin = exec.trim_start_matches(['-', '@', ':', '+', '!']);
        let bin = bin.split_whitespace().next().unwrap_or_default();
        let ok = std::fs::metadata(bin)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !ok && bin.starts_with('/') {
            found.push(Finding::new(
                Verdict::Fail,
                "systemd unit",
                format!("ExecStart names {bin}, which is not an executable file"),
                Some("install the binary there, or change ExecStart in a drop-in"),
            ));
        }
    }
}

/// The listener's address: a poolwright daemon answers there, or it is free
/// for one; anything else there would make `run` fail to start.
async fn listener(addr: std::net::SocketAddr, state_dir: &Path) -> Finding {
    let topic = "listener";
    let beyond = if addr.ip().is_loopback() {
        String::new()
    } else {
        " (beyond loopback: status and metrics are readable by whoever reaches it)".into()
    };
    if let Some(client) = crate::daemon::client::Client::find(state_dir).await {
        return Finding::new(
            Verdict::Ok,
            topic,
            format!(
                "a poolwright daemon on this state directory answers at {}{beyond}",
                client.url
            ),
            None,
        );
    }
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Finding::new(
            if beyond.is_empty() {
                Verdict::Ok
            } else {
                Verdict::Warn
            },
            topic,
            format!("{addr} is free for `poolwright run`{beyond}"),
            None,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Finding::new(
            Verdict::Fail,
            topic,
            format!("{addr} is in use, and not by a poolwright daemon on this state directory"),
            Some("stop what holds it, or give run another --listen"),
        ),
        Err(e) => Finding::new(
            Verdict::Fail,
            topic,
            format!("{addr} cannot be listened on: {e}"),
            None,
        ),
    }
}

/// The control socket's group exists, and the socket (when a daemon runs)
/// belongs to it with mode 0660, so its members can pause and resume.
fn control_group(group: &str, state_dir: &Path) -> Finding {
    let topic = "control group";
    let gid = match crate::daemon::serve::listen::group_id(group) {
        Ok(g) => g,
        Err(e) => {
            return Finding::new(
                Verdict::Fail,
                topic,
                e.to_string(),
                Some("create it (groupadd --system GROUP) and add the operators to it"),
            );
        }
    };
    let socket = crate::daemon::serve::listen::control_socket_path(state_dir);
    match socket.symlink_metadata() {
        Err(_) => Finding::new(
            Verdict::Ok,
            topic,
            format!(
                "group {group} (gid {gid}) exists; {} appears when the daemon runs",
                socket.display()
            ),
            None,
        ),
        Ok(m) => {
            let mode = m.permissions().mode() & 0o777;
            if m.gid() == gid && mode == 0o660 {
                Finding::new(
                    Verdict::Ok,
                    topic,
                    format!("{} is mode 0660, group {group}", socket.display()),
                    None,
                )
            } else {
                Finding::new(
                    Verdict::Fail,
                    topic,
                    format!(
                        "{} is mode {mode:04o}, gid {}: members of {group} (gid {gid}) cannot use it",
                        socket.display(),
                        m.gid()
                    ),
                    Some("start the daemon with --control-group GROUP"),
                )
            }
        }
    }
}
