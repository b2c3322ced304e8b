//! Semantic validation across every document of a directory, and the validated
//! [`Config`] the rest of poolwright consumes.
//!
//! Every check runs even after another fails, so one `validate` run reports every
//! problem. A config with any error is never returned: nothing can act on it.

use std::collections::{BTreeMap, HashMap};

use super::diag::{Diagnostic, did_you_mean, one_of};
use super::load::{self, Document, Limits, SourceFile, Sourced};
use super::located::{At, Pos};
use super::staging::{self, FleetStages, Problem, StageRule, Staging};
use super::types::*;
use super::values::{Duration, IntOrPercent, MAX_POOL_SIZE, MAX_QUOTA, MAX_SURGE_PERCENT};

/// A document that passed validation, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<T> {
    pub file: String,
    pub pos: Pos,
    pub doc: T,
}

/// A validated desired state: every reference resolves, every value is in range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub providers: BTreeMap<String, Entry<ProviderDoc>>,
    pub clusters: BTreeMap<String, Entry<ClusterDoc>>,
    pub pools: BTreeMap<String, Entry<NodePoolDoc>>,
    /// Shared disruption schedules (`kind: DisruptionPolicy`), already resolved
    /// into the pools that reference them.
    pub policies: BTreeMap<String, Entry<DisruptionPolicyDoc>>,
    /// Changes across pools, staged (`kind: FleetRollout`).
    pub fleets: BTreeMap<String, Entry<FleetRolloutDoc>>,
    /// Which FleetRollout governs each pool, and in which stage it rolls.
    pub staging: Staging,
    /// Where pools' images come from (`kind: ImageChannel`).
    pub channels: BTreeMap<String, Entry<ImageChannelDoc>>,
}

impl Config {
    /// The providers and clusters of `self` that are not exactly those of
    /// `trusted` ("provider NAME (FILE)"): another document, or the same in
    /// another file (its relative paths would resolve elsewhere). A branch
    /// planned before it merges is planned with the trusted ones, so it may
    /// change none: their tokens, certificates and kubeconfigs are the
    /// planning host's.
    pub fn backends_changed_from(&self, trusted: &Config) -> Vec<String> {
        let mut differ = Vec::new();
        for (name, e) in &self.providers {
            if trusted
                .providers
                .get(name)
                .is_none_or(|t| t.doc != e.doc || t.file != e.file)
            {
                differ.push(format!("provider {name} ({})", e.file));
            }
        }
        for (name, e) in &self.clusters {
            if trusted
                .clusters
                .get(name)
                .is_none_or(|t| t.doc != e.doc || t.file != e.file)
            {
                differ.push(format!("cluster {name} ({})", e.file));
            }
        }
        differ
    }

    /// The relative paths of the providers and clusters (tokens, CAs,
    /// client certificates, kubeconfigs), "FILE: FIELD PATH". A fetched
    /// config has no directory of its own: they would resolve from the
    /// working directory, which may be a checkout of anything.
    pub fn relative_backend_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |file: &str, field: &str, path: Option<&At<std::path::PathBuf>>| {
            if let Some(p) = path
                && p.value.is_relative()
            {
                out.push(format!("{file}: {field} {}", p.value.display()));
            }
        };
        for e in self.providers.values() {
            if let ProviderSpec::Http(h) = &e.doc.spec.value {
                check(&e.file, "tokenFile", h.token_file.as_ref());
                check(&e.file, "caFile", h.ca_file.as_ref());
                check(&e.file, "clientCert", h.client_cert.as_ref());
                check(&e.file, "clientKey", h.client_key.as_ref());
            }
        }
        for e in self.clusters.values() {
            check(&e.file, "kubeconfig", e.doc.spec.value.kubeconfig.as_ref());
        }
        out
    }
}

/// What loading a directory produced: the config when it is valid, and every
/// diagnostic (errors and warnings) in file order.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub config: Option<Config>,
    pub diagnostics: Vec<Diagnostic>,
    pub files: usize,
    pub documents: usize,
}

impl LoadReport {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    pub fn is_valid(&self) -> bool {
        self.config.is_some()
    }
}

/// Parse and validate files already in memory (a working tree, a git tree, a fuzzer).
pub fn load_sources(files: &[SourceFile], limits: &Limits) -> LoadReport {
    load_sources_cached(files, limits, &mut ParseCache::default())
}

/// What each file parsed to, kept between loads of a long-running process:
/// a file whose bytes did not change is not parsed again (an edit to one
/// file of ten re-parses one), and every document is validated as ever.
#[derive(Debug, Default)]
pub struct ParseCache {
    files: HashMap<String, Parsed>,
}

#[derive(Debug)]
struct Parsed {
    bytes: Vec<u8>,
    docs: Vec<Sourced>,
    diagnostics: Vec<Diagnostic>,
}

/// [`load_sources`], parsing only files whose name or bytes are new to `cache`.
/// The cache keeps the files of this load only.
pub fn load_sources_cached(
    files: &[SourceFile],
    limits: &Limits,
    cache: &mut ParseCache,
) -> LoadReport {
    let mut diags = Vec::new();
    let mut docs = Vec::new();
    let mut kept = HashMap::with_capacity(files.len());
    for file in files {
        let parsed = match cache.files.remove(&file.display) {
            Some(p) if p.bytes == file.bytes => p,
            _ => {
                let (docs, diagnostics) = load::parse_file(file, limits);
                Parsed {
                    bytes: file.bytes.clone(),
                    docs,
                    diagnostics,
                }
            }
        };
        docs.extend(parsed.docs.iter().cloned());
        diags.extend(parsed.diagnostics.iter().cloned());
        kept.insert(file.display.clone(), parsed);
    }
    cache.files = kept;
    let documents = docs.len() + diags.len();
    let config = validate(docs, &mut diags);
    diags.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    diags.dedup();
    let valid = !diags.iter().any(Diagnostic::is_error);
    LoadReport {
        config: valid.then_some(config),
        diagnostics: diags,
        files: files.len(),
        documents,
    }
}

/// Collects diagnostics for one document.
struct Checker<'a> {
    file: &'a str,
    diags: &'a mut Vec<Diagnostic>,
}

impl Checker<'_> {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.diags.push(Diagnostic::error(self.file, pos, message));
    }
    fn warning(&mut self, pos: Pos, message: impl Into<String>) {
        self.diags
            .push(Diagnostic::warning(self.file, pos, message));
    }
}

fn validate(docs: Vec<Sourced>, diags: &mut Vec<Diagnostic>) -> Config {
    let mut config = Config::default();
    for Sourced { file, pos, doc } in docs {
        let mut c = Checker { file: &file, diags };
        match doc {
            Document::Provider(d) => {
                check_provider(&mut c, &d);
                let name = d.metadata.name.clone();
                insert_unique(&mut c, &mut config.providers, "Provider", name, pos, *d);
            }
            Document::Cluster(d) => {
                check_cluster(&mut c, &d);
                let name = d.metadata.name.clone();
                insert_unique(&mut c, &mut config.clusters, "Cluster", name, pos, d);
            }
            Document::NodePool(d) => {
                check_pool(&mut c, &d);
                let name = d.metadata.name.clone();
                insert_unique(&mut c, &mut config.pools, "NodePool", name, pos, *d);
            }
            Document::FleetRollout(d) => {
                check_fleet(&mut c, &d);
                let name = d.metadata.name.clone();
                insert_unique(&mut c, &mut config.fleets, "FleetRollout", name, pos, *d);
            }
            Document::ImageChannel(d) => {
                check_channel(&mut c, &d);
                let name = d.metadata.name.clone();
                insert_unique(&mut c, &mut config.channels, "ImageChannel", name, pos, *d);
            }
            Document::DisruptionPolicy(d) => {
                // A shared policy must make sense on its own, whoever uses it.
                check_rules(&mut c, &d.spec.value, d.spec.pos, false);
                check_rules(&mut c, &d.spec.value, d.spec.pos, true);
                let name = d.metadata.name.clone();
                insert_unique(
                    &mut c,
                    &mut config.policies,
                    "DisruptionPolicy",
                    name,
                    pos,
                    d,
                );
            }
        }
    }
    check_references(&config, diags);
    check_channel_references(&config, diags);
    resolve_disruption(&mut config, diags);
    resolve_staging(&mut config, diags);
    config
}

/// Most entries of an ImageChannel's deny list.
const MAX_DENY: usize = 1000;
/// How often a channel's source may be asked, at most and at least.
const MIN_CHANNEL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_CHANNEL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// An ImageChannel's own values.
fn check_channel(c: &mut Checker, d: &ImageChannelDoc) {
    let spec = &d.spec;
    let at = spec.pos;
    if spec.deny.len() > MAX_DENY {
        c.error(
            at,
            format!(
                "deny lists {} images: at most {MAX_DENY} (a recall, `poolwright image recall`, keeps a bad image out without a list in the files)",
                spec.deny.len()
            ),
        );
    } else if let Some(bad) = spec
        .deny
        .iter()
        .find(|i| i.is_empty() || i.len() > MAX_TEMPLATE_STRING)
    {
        let shown: String = bad.chars().take(40).collect();
        c.error(
            at,
            format!("deny entry {shown:?}: an image id of 1 to {MAX_TEMPLATE_STRING} bytes"),
        );
    }
    if let Some(i) = &spec.interval
        && !(MIN_CHANNEL_INTERVAL..=MAX_CHANNEL_INTERVAL).contains(&i.value.as_std())
    {
        c.error(
            i.pos.or(at),
            format!("interval must be from 10s to 24h, not {}", i.value),
        );
    }
    if let ChannelSource::Aws(a) = &spec.source.value {
        let pos = spec.source.pos.or(at);
        match (&a.ssm_parameter, &a.images) {
            (Some(_), Some(_)) | (None, None) => c.error(
                pos,
                "source.aws needs exactly one of ssmParameter (an SSM parameter holding an AMI id) or images (owners and a name pattern)",
            ),
            (Some(p), None) if !p.starts_with('/') || p.len() > 2048 => c.error(
                p.pos.or(pos),
                format!("ssmParameter {:?} is not an SSM parameter path (/aws/service/...)", p.value),
            ),
            (None, Some(f)) if f.owners.is_empty() || f.owners.len() > 20 || f.name.is_empty() || f.name.len() > 256 => c.error(
                f.pos.or(pos),
                "images needs 1 to 20 owners and a name pattern of 1 to 256 characters",
            ),
            _ => {}
        }
    }
}

/// Every pool's channel exists; every channel's provider is of its type; a
/// channel no pool follows is said (it is asked for nothing).
fn check_channel_references(config: &Config, diags: &mut Vec<Diagnostic>) {
    let names: Vec<&str> = config.channels.keys().map(String::as_str).collect();
    let mut used = std::collections::HashSet::new();
    for entry in config.pools.values() {
        let spec = &entry.doc.spec;
        let Some(channel) = spec.template.image.as_ref().and_then(ImageRef::channel) else {
            continue;
        };
        used.insert(channel.as_str());
        if !config.channels.contains_key(channel.as_str()) {
            Checker {
                file: &entry.file,
                diags,
            }
            .error(
                channel.pos.or(spec.pos),
                dangling(
                    "template.image.channel",
                    "ImageChannel",
                    channel.as_str(),
                    &names,
                ),
            );
        }
    }
    let providers: Vec<&str> = config.providers.keys().map(String::as_str).collect();
    for (name, e) in &config.channels {
        let mut c = Checker {
            file: &e.file,
            diags,
        };
        let (provider, ty) = e.doc.spec.source.provider();
        match config.providers.get(provider.as_str()) {
            None => c.error(
                provider.pos.or(e.doc.spec.pos),
                dangling("source provider", "Provider", provider.as_str(), &providers),
            ),
            Some(p) if p.doc.spec.type_name() != ty => c.error(
                provider.pos.or(e.doc.spec.pos),
                format!(
                    "a {ty} source needs a provider of type {ty}, but provider {:?} is of type {}",
                    provider.value,
                    p.doc.spec.type_name()
                ),
            ),
            Some(_) => {}
        }
        if !used.contains(name.as_str()) {
            c.warning(
                e.doc.metadata.name.pos.or(e.pos),
                format!("ImageChannel {name:?} is followed by no pool (no template.image.channel names it): it is never asked"),
            );
        }
    }
}

/// Most stages and gates a FleetRollout may have.
const MAX_STAGES: usize = 100;
const MAX_GATES: usize = 16;
/// Most pools a count in a FleetRollout may name.
const MAX_FLEET_POOLS: i64 = 1_000_000;

/// A FleetRollout's own values: bounds, names, URLs.
fn check_fleet(c: &mut Checker, d: &FleetRolloutDoc) {
    let spec = &d.spec;
    let at = spec.pos;
    let count_or_share = |c: &mut Checker, field: &str, v: &At<IntOrPercent>| match v.value {
        IntOrPercent::Int(n) if !(1..=MAX_FLEET_POOLS).contains(&n) => c.error(
            v.pos.or(at),
            format!("{field} must be 1 to {MAX_FLEET_POOLS} pools, got {n}"),
        ),
        IntOrPercent::Percent(p) if !(1..=100).contains(&p) => c.error(
            v.pos.or(at),
            format!("{field} must be 1% to 100%, got {p}%"),
        ),
        _ => {}
    };
    if let Some(m) = &spec.max_concurrent_pools {
        count_or_share(c, "maxConcurrentPools", m);
    }
    let failed = &spec.halt.failed_pools;
    if !(1..=100_000).contains(&failed.value) {
        c.error(
            failed.pos.or(at),
            format!(
                "halt.failedPools must be 1 to 100000 pools, got {}",
                failed.value
            ),
        );
    }
    let stages = &spec.stages;
    if stages.is_empty() {
        c.error(
            stages.pos.or(at),
            "stages must name at least one stage (the last one takes every governed pool)",
        );
    } else if stages.len() > MAX_STAGES {
        c.error(
            stages.pos.or(at),
            format!("at most {MAX_STAGES} stages, got {}", stages.len()),
        );
    }
    let mut names: BTreeMap<&str, Pos> = BTreeMap::new();
    for (i, stage) in stages.iter().enumerate() {
        let pos = stage.name.pos.or(stage.pos).or(at);
        check_name(c, &stage.name);
        if let Some(first) = names.insert(stage.name.as_str(), pos) {
            c.error(
                pos,
                format!(
                    "duplicate stage {:?}: first named at {}",
                    stage.name.value, first
                ),
            );
        }
        if let Some(share) = &stage.pools {
            count_or_share(c, "pools", share);
        }
        if i + 1 == stages.len() && (stage.selector.is_some() || stage.pools.is_some()) {
            let field = if stage.selector.is_some() {
                "selector"
            } else {
                "pools"
            };
            let p = stage
                .selector
                .as_ref()
                .map(|s| s.pos)
                .or(stage.pools.as_ref().map(|s| s.pos))
                .unwrap_or(pos)
                .or(pos);
            c.error(
                p,
                format!(
                    "the last stage ({:?}) takes every governed pool not in an earlier stage: remove its {field}, or add a stage after it",
                    stage.name.value
                ),
            );
        }
    }
    if spec.gates.len() > MAX_GATES {
        c.error(
            spec.gates[MAX_GATES].pos.or(at),
            format!("at most {MAX_GATES} gates, got {}", spec.gates.len()),
        );
    }
    let mut gate_names: BTreeMap<&str, Pos> = BTreeMap::new();
    for gate in &spec.gates {
        let pos = gate.name.pos.or(gate.pos).or(at);
        check_name(c, &gate.name);
        if let Some(first) = gate_names.insert(gate.name.as_str(), pos) {
            c.error(
                pos,
                format!(
                    "duplicate gate {:?}: first named at {}",
                    gate.name.value, first
                ),
            );
        }
        let prom = &gate.prometheus;
        let url = &prom.url;
        match url::Url::parse(url.as_str()) {
            Ok(u) if !matches!(u.scheme(), "http" | "https") => c.error(
                url.pos.or(prom.pos),
                format!(
                    "prometheus.url must be http or https, got {:?}",
                    u.scheme()
                ),
            ),
            Ok(u) if u.host_str().is_none() => c.error(
                url.pos.or(prom.pos),
                "prometheus.url must name a host",
            ),
            Ok(u) if !u.username().is_empty() || u.password().is_some() => c.error(
                url.pos.or(prom.pos),
                "prometheus.url must not carry credentials: desired-state files are read by every reviewer",
            ),
            Ok(u) if u.query().is_some() || u.fragment().is_some() => c.error(
                url.pos.or(prom.pos),
                "prometheus.url is the server's base URL (e.g. http://prometheus:9090): no query or fragment",
            ),
            Ok(_) => {}
            Err(e) => c.error(
                url.pos.or(prom.pos),
                format!("prometheus.url {:?} is not a URL: {e}", url.value),
            ),
        }
        if url.len() > 2048 {
            c.error(
                url.pos.or(prom.pos),
                "prometheus.url is longer than 2048 bytes",
            );
        }
        let query = &prom.query;
        if query.trim().is_empty() {
            c.error(query.pos.or(prom.pos), "prometheus.query must not be empty");
        } else if query.len() > 8192 {
            c.error(
                query.pos.or(prom.pos),
                format!("prometheus.query is {} bytes; at most 8192", query.len()),
            );
        }
        let within = |c: &mut Checker, field: &str, v: &Option<At<Duration>>, lo: u64, hi: u64| {
            if let Some(v) = v {
                let secs = v.value.as_std().as_secs_f64();
                if secs < lo as f64 || secs > hi as f64 {
                    c.error(
                        v.pos.or(pos),
                        format!(
                            "{field} must be {} to {}, got {}",
                            Duration::secs(lo),
                            Duration::secs(hi),
                            v.value
                        ),
                    );
                }
            }
        };
        within(c, "for", &gate.hold_for, 0, 24 * 3600);
        within(c, "interval", &gate.interval, 1, 600);
        within(c, "prometheus.timeout", &prom.timeout, 1, 60);
    }
}

/// Which FleetRollout governs each pool, and each stage's pools: a pool
/// governed twice, two stages claiming one pool and an empty stage are errors.
fn resolve_staging(config: &mut Config, diags: &mut Vec<Diagnostic>) {
    let mut staging = Staging::default();
    // Who governs each pool: the first FleetRollout (by name) that selects it.
    let mut governed: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut twice: Vec<(&str, &str, &str)> = Vec::new();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut matched: BTreeMap<&str, usize> = BTreeMap::new();
    for (fleet, e) in &config.fleets {
        let selector = e.doc.spec.selector.as_ref().map(|s| &s.value);
        for (pool, p) in &config.pools {
            if selector.is_none_or(|s| s.matches(&p.doc.metadata.labels)) {
                *matched.entry(fleet).or_default() += 1;
                match owner.get(pool.as_str()) {
                    Some(first) => twice.push((pool, first, fleet)),
                    None => {
                        owner.insert(pool, fleet);
                        governed.entry(fleet).or_default().push(pool);
                    }
                }
            }
        }
    }
    // A pool governed twice: said once per pair of FleetRollouts, with the
    // first few pools (a selector mistake can match thousands).
    let mut pairs: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (pool, first, second) in twice {
        pairs.entry((first, second)).or_default().push(pool);
    }
    for ((first, second), pools) in pairs {
        let e = &config.fleets[second];
        let pos = e
            .doc
            .spec
            .selector
            .as_ref()
            .map_or(e.pos, |s| s.pos.or(e.pos));
        let shown: Vec<&str> = pools.iter().take(5).copied().collect();
        let more = pools.len().saturating_sub(shown.len());
        diags.push(Diagnostic::error(
            &e.file,
            pos,
            format!(
                "FleetRollout {second:?} selects pool(s) {}{} that FleetRollout {first:?} already governs: a pool is governed by at most one FleetRollout",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
        ));
    }
    for (fleet, e) in &config.fleets {
        let spec = &e.doc.spec;
        let pools: Vec<(&str, &BTreeMap<String, String>)> = governed
            .get(fleet.as_str())
            .map(|names| {
                names
                    .iter()
                    .map(|n| (*n, &config.pools[*n].doc.metadata.labels))
                    .collect()
            })
            .unwrap_or_default();
        let rules: Vec<StageRule> = spec
            .stages
            .iter()
            .map(|s| StageRule {
                selector: s.selector.as_ref().map(|x| &x.value),
                share: s.pools.as_ref().map(|x| x.value),
            })
            .collect();
        let (stages, problems) = staging::assign(&pools, &rules);
        let stage_pos = |i: usize| {
            spec.stages
                .get(i)
                .map_or(spec.pos, |s| s.name.pos.or(s.pos).or(spec.pos))
        };
        let stage_name = |i: usize| {
            spec.stages
                .get(i)
                .map_or(String::new(), |s| s.name.value.clone())
        };
        let mut overlaps: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
        for p in problems {
            match p {
                Problem::Overlap {
                    pool,
                    first,
                    second,
                } => overlaps.entry((first, second)).or_default().push(pool),
                Problem::Empty { stage, why } => diags.push(Diagnostic::error(
                    &e.file,
                    stage_pos(stage),
                    format!(
                        "stage {:?} of FleetRollout {fleet:?} holds no pool: {why}",
                        stage_name(stage)
                    ),
                )),
            }
        }
        for ((first, second), pools) in overlaps {
            let shown: Vec<&str> = pools.iter().take(5).map(String::as_str).collect();
            diags.push(Diagnostic::error(
                &e.file,
                stage_pos(second),
                format!(
                    "stages {:?} and {:?} both select pool(s) {}{}: a pool rolls in one stage",
                    stage_name(first),
                    stage_name(second),
                    shown.join(", "),
                    match pools.len() - shown.len() {
                        0 => String::new(),
                        n => format!(" and {n} more"),
                    }
                ),
            ));
        }
        if matched.get(fleet.as_str()).is_none_or(|n| *n == 0) {
            diags.push(Diagnostic::warning(
                &e.file,
                spec.selector.as_ref().map_or(e.pos, |s| s.pos.or(e.pos)),
                format!("FleetRollout {fleet:?} governs no pool: its selector matches none"),
            ));
        }
        for (i, stage_pools) in stages.iter().enumerate() {
            for pool in stage_pools {
                staging.of_pool.insert(pool.clone(), (fleet.clone(), i));
            }
        }
        staging.fleets.insert(
            fleet.clone(),
            FleetStages {
                stages: stages
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| (stage_name(i), p))
                    .collect(),
            },
        );
    }
    config.staging = staging;
}

/// Give each pool its effective disruption rules (the referenced shared policy,
/// overridden field by field by the pool's own) and check them as a whole.
fn resolve_disruption(config: &mut Config, diags: &mut Vec<Diagnostic>) {
    let names: Vec<String> = config.policies.keys().cloned().collect();
    for entry in config.pools.values_mut() {
        let mut c = Checker {
            file: &entry.file,
            diags,
        };
        let spec = &mut entry.doc.spec;
        let own = &spec.value.disruption;
        let resolved = match &own.policy_ref {
            Some(r) => match config.policies.get(r.as_str()) {
                Some(shared) => own.resolved_with(&shared.doc.spec.value),
                None => {
                    let known: Vec<&str> = names.iter().map(String::as_str).collect();
                    c.error(
                        r.pos.or(spec.pos),
                        dangling(
                            "disruption.policyRef",
                            "DisruptionPolicy",
                            r.as_str(),
                            &known,
                        ),
                    );
                    continue;
                }
            },
            None => own.clone(),
        };
        // Window details were checked where they are written; here, the whole,
        // reported in the pool's file: at the pool's own field, or at its
        // policyRef for what the shared policy supplies.
        let here = |from_pool: bool, pos: Pos| if from_pool { pos } else { Pos::default() };
        let rules = DisruptionRules {
            policy: resolved.policy.clone().map(|p| At {
                pos: here(own.policy.is_some(), p.pos),
                ..p
            }),
            windows: resolved
                .windows
                .iter()
                .map(|w| At {
                    pos: here(!own.windows.is_empty(), w.pos),
                    ..w.clone()
                })
                .collect(),
            until: resolved.until.clone().map(|u| At {
                pos: here(own.until.is_some(), u.pos),
                ..u
            }),
            applies_to: resolved.applies_to.clone(),
        };
        let fallback = own
            .policy_ref
            .as_ref()
            .map_or(spec.pos, |r| r.pos.or(spec.pos));
        let all_shared = own.policy_ref.is_some()
            && own.policy.is_none()
            && own.windows.is_empty()
            && own.until.is_none();
        if !all_shared {
            // (A shared policy used as it is was checked in its own document.)
            check_rules(&mut c, &rules, fallback, true);
        }
        spec.value.disruption = resolved;
    }
}

/// Names are unique per kind; the second definition is the error, and it names
/// the first so both places are known.
fn insert_unique<T>(
    c: &mut Checker,
    map: &mut BTreeMap<String, Entry<T>>,
    kind: &str,
    name: At<String>,
    doc_pos: Pos,
    doc: T,
) {
    check_name(c, &name);
    let at = name.pos.or(doc_pos);
    if let Some(first) = map.get(name.as_str()) {
        c.error(
            at,
            format!(
                "duplicate {kind} {:?}: first defined at {}:{}",
                name.value, first.file, first.pos
            ),
        );
        return;
    }
    let entry = Entry {
        file: c.file.to_string(),
        pos: at,
        doc,
    };
    map.insert(name.value, entry);
}

/// 1 to `max` lower-case letters, digits and '-', starting and ending with a
/// letter or digit (an RFC 1123 label when `max` is 63).
pub fn is_dns_label(n: &str, max: usize) -> bool {
    !n.is_empty()
        && n.len() <= max
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-')
}

/// Names end up in cloud resource names, Kubernetes objects and metric labels,
/// so they follow the strictest of those: an RFC 1123 label.
fn check_name(c: &mut Checker, name: &At<String>) {
    let n = name.as_str();
    let ok = is_dns_label(n, 63);
    if !ok {
        c.error(
            name.pos,
            format!(
                "invalid name {n:?}: use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
            ),
        );
    }
}

fn check_url(c: &mut Checker, field: &str, url: &At<String>, fallback: Pos) {
    let ok = ["http://", "https://"]
        .iter()
        .any(|p| url.strip_prefix(p).is_some_and(|rest| !rest.is_empty()));
    if !ok {
        c.error(
            url.pos.or(fallback),
            format!(
                "{field}: invalid URL {:?}: expected http://HOST[:PORT][/PATH] or https://...",
                url.value
            ),
        );
    }
}

fn check_provider(c: &mut Checker, d: &ProviderDoc) {
    let pos = d.spec.pos;
    match &d.spec.value {
        ProviderSpec::Sim(sim) => {
            if let Some(speed) = &sim.speed
                && !(speed.value.is_finite() && (0.001..=1_000_000.0).contains(&speed.value))
            {
                c.error(
                    speed.pos.or(pos),
                    format!(
                        "speed must be a number from 0.001 to 1000000, not {:?}",
                        speed.value
                    ),
                );
            }
            check_sim(c, sim, pos);
        }
        ProviderSpec::Aws(aws) => {
            if let Some(url) = &aws.endpoint_url {
                check_url(c, "endpointUrl", url, pos);
            }
            if let Some(arn) = &aws.assume_role_arn
                && !arn.starts_with("arn:")
            {
                c.error(
                    arn.pos.or(pos),
                    format!("assumeRoleArn {:?} is not an ARN (expected arn:aws:iam::ACCOUNT:role/NAME)", arn.value),
                );
            }
            if aws.max_attempts == Some(0) {
                c.error(pos, "maxAttempts must be at least 1");
            }
        }
        ProviderSpec::Http(http) => check_http(c, http, pos),
    }
}

/// Whether a URL host is this machine: the only place plain HTTP may go
/// without `allowInsecure`.
fn is_loopback_host(host: &url::Url) -> bool {
    match host.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Headers poolwright sets itself (or that carry secrets, which belong in a file).
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "idempotency-key",
    "content-type",
    "content-length",
    "transfer-encoding",
    "host",
    "accept",
    "connection",
    "user-agent",
];

fn check_http(c: &mut Checker, http: &HttpProvider, pos: Pos) {
    let at = http.url.pos.or(pos);
    let invalid = |c: &mut Checker, why: String| {
        c.error(
            at,
            format!(
                "url: invalid URL {:?}{why}: expected http://HOST[:PORT][/PATH] or https://...",
                http.url.value
            ),
        )
    };
    match http.url.parse::<url::Url>() {
        Err(e) => invalid(c, format!(" ({e})")),
        Ok(url)
            if !matches!(url.scheme(), "http" | "https")
                || url.host_str().is_none_or(str::is_empty) =>
        {
            invalid(c, String::new())
        }
        Ok(url) => {
            let insecure = http.allow_insecure.value;
            if url.scheme() == "https" && insecure {
                c.warning(
                    http.allow_insecure.pos.or(pos),
                    "allowInsecure has no effect with an https:// url",
                );
            }
            if url.scheme() == "http" && !is_loopback_host(&url) && !insecure {
                c.error(
                    at,
                    format!(
                        "url: plain http:// is allowed only to a loopback address (127.0.0.1, ::1, localhost), \
                         not {:?}: the bearer token and every answer would cross the network unencrypted. \
                         Use https:// (caFile for a private CA), or set allowInsecure: true to accept that",
                        url.host_str().unwrap_or_default()
                    ),
                );
            }
            if !url.username().is_empty() || url.password().is_some() {
                c.error(
                    at,
                    "url: credentials do not go in the URL; put a bearer token in tokenFile or tokenEnv",
                );
            }
            if url.query().is_some() || url.fragment().is_some() {
                c.error(at, "url: the base URL takes no query or fragment");
            }
            if url.scheme() == "http" {
                for (field, set) in [
                    ("caFile", http.ca_file.as_ref().map(|f| f.pos)),
                    ("clientCert", http.client_cert.as_ref().map(|f| f.pos)),
                ] {
                    if let Some(p) = set {
                        c.warning(
                            p.or(pos),
                            format!("{field} has no effect with a plain http:// url"),
                        );
                    }
                }
            }
        }
    }
    if let (Some(_), Some(env)) = (&http.token_file, &http.token_env) {
        c.error(
            env.pos.or(pos),
            "tokenFile and tokenEnv exclude each other; keep one",
        );
    }
    if let Some(env) = &http.token_env {
        let ok = !env.is_empty()
            && env.len() <= 128
            && !env.starts_with(|ch: char| ch.is_ascii_digit())
            && env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            c.error(
                env.pos.or(pos),
                format!(
                    "tokenEnv: {:?} is not an environment variable name (letters, digits and '_', not starting with a digit)",
                    env.value
                ),
            );
        }
    }
    match (&http.client_cert, &http.client_key) {
        (Some(f), None) => c.error(
            f.pos.or(pos),
            "clientCert needs clientKey (and the other way round)",
        ),
        (None, Some(f)) => c.error(
            f.pos.or(pos),
            "clientKey needs clientCert (and the other way round)",
        ),
        _ => {}
    }
    let timeout = http.timeout.value.as_std();
    if timeout.is_zero() || timeout > std::time::Duration::from_secs(600) {
        c.error(
            http.timeout.pos.or(pos),
            format!(
                "timeout must be above 0 and at most 10m, got {}",
                http.timeout.value
            ),
        );
    }
    if let Some(a) = &http.max_attempts
        && !(1..=20).contains(&a.value)
    {
        c.error(
            a.pos.or(pos),
            format!("maxAttempts must be 1 to 20, got {}", a.value),
        );
    }
    if let Some(o) = &http.operation_timeout {
        let d = o.value.as_std();
        if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(1800) {
            c.error(
                o.pos.or(pos),
                format!("operationTimeout must be 1s to 30m, got {}", o.value),
            );
        } else if d < timeout {
            c.error(
                o.pos.or(pos),
                format!(
                    "operationTimeout ({}) is shorter than timeout ({}): a request could not finish within it",
                    o.value, http.timeout.value
                ),
            );
        }
    }
    if let Some(p) = &http.poll_interval {
        let d = p.value.as_std();
        if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(3600) {
            c.error(
                p.pos.or(pos),
                format!("pollInterval must be 1s to 1h, got {}", p.value),
            );
        }
    }
    let pos = http.headers.pos.or(pos);
    for (name, value) in http.headers.iter() {
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_name {
            c.error(pos, format!("headers: {name:?} is not a valid header name"));
        } else if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            c.error(
                pos,
                format!(
                    "headers: {name} is set by poolwright (a bearer token goes in tokenFile or tokenEnv, never in YAML)"
                ),
            );
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            c.error(
                pos,
                format!("headers: the value of {name} must be printable ASCII"),
            );
        }
    }
}

fn check_sim(c: &mut Checker, sim: &SimProvider, pos: Pos) {
    if let Some(q) = sim.quota
        && q > MAX_QUOTA
    {
        c.error(
            pos,
            format!("quota must be at most {MAX_QUOTA} nodes, got {q}"),
        );
    }
    check_sim_placement(c, sim, pos);
    for i in &sim.images {
        if let Err(e) = i.released.parse::<jiff::Timestamp>() {
            c.error(
                i.released.pos.or(pos),
                format!("images: released {:?} is not an RFC 3339 time such as 2026-12-01T10:00:00Z: {e}", i.released.value),
            );
        }
        if i.image.is_empty() || i.image.len() > MAX_TEMPLATE_STRING {
            c.error(
                pos,
                format!("images: an image id of 1 to {MAX_TEMPLATE_STRING} bytes"),
            );
        }
    }
    let f = &sim.failures;
    let probabilities = [
        ("neverHealthy", f.never_healthy),
        ("apiErrors", f.api_errors),
        ("throttling", f.throttling),
        ("drainBlocked", f.drain_blocked),
    ];
    for (field, p) in probabilities {
        if !(0.0..=1.0).contains(&p) {
            c.error(
                pos,
                format!("failures.{field} must be a probability between 0 and 1, not {p}"),
            );
        }
    }
    let distributions = [
        ("bootTime", &sim.boot_time),
        ("healthDelay", &sim.health_delay),
        ("drainTime", &sim.drain_time),
        ("terminateTime", &sim.terminate_time),
    ];
    for (field, d) in distributions {
        match d {
            Distribution::Uniform { min, max } if max < min => c.error(
                pos,
                format!("{field}: uniform max ({max}) is below min ({min})"),
            ),
            Distribution::Lognormal { sigma, .. } if !(sigma.is_finite() && *sigma >= 0.0) => c
                .error(
                    pos,
                    format!("{field}: lognormal sigma must be 0 or more, not {sigma}"),
                ),
            _ => {}
        }
    }
}

fn check_sim_placement(c: &mut Checker, sim: &SimProvider, pos: Pos) {
    if sim.zones.len() > 64 || sim.zones.iter().any(|z| !is_dns_label(z, 63)) {
        c.error(
            pos,
            "zones: at most 64, each 1 to 63 lower-case letters, digits and '-'",
        );
    }
    let too_long = |v: &String| v.is_empty() || v.len() > MAX_TEMPLATE_STRING;
    if sim.node_labels.len() > 64
        || sim
            .node_labels
            .iter()
            .any(|(k, vs)| !is_label_key(k) || vs.len() > 64 || vs.iter().any(too_long))
    {
        c.error(
            pos,
            format!(
                "nodeLabels: at most 64 labels of Kubernetes label keys, each with at most 64 values of 1 to {MAX_TEMPLATE_STRING} bytes"
            ),
        );
    }
}

/// A Kubernetes label key: an optional DNS-subdomain prefix (at most 253)
/// and '/', then a name of 1 to 63 letters, digits, '-', '_' and '.',
/// starting and ending with a letter or digit.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty() && p.len() <= 253 && p.split('.').all(|l| is_dns_label(l, 63))
    });
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    prefix_ok && name_ok
}

fn check_cluster(c: &mut Checker, d: &ClusterDoc) {
    let spec = &d.spec;
    if let Some(kubeconfig) = &spec.kubeconfig
        && spec.in_cluster.value
    {
        c.error(
            kubeconfig.pos.or(spec.pos),
            "kubeconfig and inCluster: true exclude each other; keep one",
        );
    }
    if spec.node_match.by == NodeMatchBy::Label && spec.node_match.label.is_none() {
        c.error(
            spec.pos,
            "nodeMatch.by is \"label\" but nodeMatch.label is missing",
        );
    }
}

/// The longest template string (an image reference, an instance type, a
/// label or tag): what a provider takes is far shorter, and every string is
/// kept in journals, plans and events. An annotation's value may be longer
/// (some carry JSON), up to [`MAX_ANNOTATION_VALUE`].
const MAX_TEMPLATE_STRING: usize = 1024;
const MAX_ANNOTATION_VALUE: usize = 64 * 1024;

/// Template strings past [`MAX_TEMPLATE_STRING`] bytes, said at the spec
/// (the template's fields carry no position of their own).
fn check_template_lengths(c: &mut Checker, spec: &At<NodePoolSpec>) {
    let t = &spec.template;
    let mut long: Vec<(String, usize, usize)> = [
        (
            "image",
            &t.image.as_ref().and_then(ImageRef::id).map(str::to_string),
        ),
        ("instanceType", &t.instance_type),
        ("kubernetesVersion", &t.kubernetes_version),
    ]
    .into_iter()
    .filter_map(|(name, v)| Some((name.to_string(), v.as_ref()?.len(), MAX_TEMPLATE_STRING)))
    .collect();
    for (what, map, value_limit) in [
        ("labels", &t.labels, MAX_TEMPLATE_STRING),
        ("annotations", &t.annotations, MAX_ANNOTATION_VALUE),
        ("tags", &t.tags, MAX_TEMPLATE_STRING),
    ] {
        for (k, v) in map {
            let shown: String = k.chars().take(40).collect();
            long.push((
                format!("{what} key {shown:?}"),
                k.len(),
                MAX_TEMPLATE_STRING,
            ));
            long.push((format!("{what}.{shown}"), v.len(), value_limit));
        }
    }
    for (what, len, limit) in long {
        if len > limit {
            c.error(
                spec.pos,
                format!("template {what} is {len} bytes; at most {limit}"),
            );
        }
    }
}

fn check_pool(c: &mut Checker, d: &NodePoolDoc) {
    let spec = &d.spec;
    check_size(c, spec);
    check_template_lengths(c, spec);
    check_rollout(c, &spec.rollout, spec.pos);
    let d = &spec.disruption;
    check_rules(
        c,
        &DisruptionRules {
            policy: d.policy.clone(),
            windows: d.windows.clone(),
            until: d.until.clone(),
            applies_to: d.applies_to.clone(),
        },
        spec.pos,
        false,
    );
    if let Some(aws) = &spec.template.aws {
        let lt = &aws.launch_template;
        if lt.name.is_some() == lt.id.is_some() {
            c.error(
                lt.pos.or(aws.pos),
                "launchTemplate needs exactly one of \"name\" or \"id\"",
            );
        }
    }
}

/// Why `until` cannot be used: a timestamp past what can be represented is
/// said to be so (it is well-formed RFC 3339), anything else is not RFC 3339.
fn until_error(text: &str, e: &jiff::Error) -> String {
    // Well-formed if the same text in the year 2000 reads: then only its year
    // is beyond jiff's (and so poolwright's) range.
    let well_formed = text.len() > 4
        && text.is_char_boundary(4)
        && text[..4].bytes().all(|b| b.is_ascii_digit())
        && format!("2000{}", &text[4..])
            .parse::<jiff::Timestamp>()
            .is_ok();
    if well_formed {
        format!(
            "until: {text:?} is later than the latest time poolwright can represent ({}); \
             a Block freeze without until holds until the policy is changed",
            jiff::Timestamp::MAX.strftime("%Y-%m-%d")
        )
    } else {
        format!(
            "until: {text:?} is not an RFC 3339 timestamp such as 2027-01-04T08:00:00Z or \
             2027-01-04T09:00:00+01:00 ({e})"
        )
    }
}

fn check_size(c: &mut Checker, spec: &At<NodePoolSpec>) {
    let non_negative = |c: &mut Checker, what: &str, v: &At<i64>| {
        if v.value < 0 {
            c.error(
                v.pos.or(spec.pos),
                format!("{what} must not be negative, got {}", v.value),
            );
            false
        } else if v.value > MAX_POOL_SIZE {
            c.error(
                v.pos.or(spec.pos),
                format!(
                    "{what} must be at most {MAX_POOL_SIZE} (nodes in one pool), got {}",
                    v.value
                ),
            );
            false
        } else {
            true
        }
    };
    let size_ok = spec
        .size
        .as_ref()
        .is_none_or(|s| non_negative(c, "size", s));
    match &spec.autoscaling {
        None if spec.size.is_none() => c.error(
            spec.pos,
            "missing \"size\" or \"autoscaling\": say how many nodes the pool should have",
        ),
        None => {}
        Some(a) => {
            let min_ok = non_negative(c, "autoscaling.min", &a.min);
            let max_ok = non_negative(c, "autoscaling.max", &a.max);
            if min_ok && max_ok && a.max.value < a.min.value {
                c.error(
                    a.max.pos.or(a.pos),
                    format!(
                        "autoscaling.max ({}) is below autoscaling.min ({})",
                        a.max.value, a.min.value
                    ),
                );
            } else if let Some(size) = &spec.size
                && size_ok
                && min_ok
                && max_ok
                && !(a.min.value..=a.max.value).contains(&size.value)
            {
                c.error(
                    size.pos.or(spec.pos),
                    format!(
                        "size {} is outside the autoscaling bounds [{}, {}]",
                        size.value, a.min.value, a.max.value
                    ),
                );
            }
        }
    }
}

fn check_rollout(c: &mut Checker, r: &Rollout, fallback: Pos) {
    let semantics = r.semantics();
    let sem_name = semantics.as_str();
    let budget_ok =
        |c: &mut Checker, field: &str, v: &At<IntOrPercent>, max_percent: Option<i64>| {
            if v.is_negative() {
                c.error(
                    v.pos.or(fallback),
                    format!("{field} must not be negative, got {}", v.value),
                );
            } else if let IntOrPercent::Int(n) = v.value
                && n > MAX_POOL_SIZE
            {
                c.error(
                    v.pos.or(fallback),
                    format!("{field} must be at most {MAX_POOL_SIZE} nodes, got {n}"),
                );
            } else if let (IntOrPercent::Percent(p), Some(max)) = (v.value, max_percent)
                && p > max
            {
                c.error(
                    v.pos.or(fallback),
                    format!("{field} must be at most {max}%, got {p}%"),
                );
            }
        };
    if let Some(e) = &r.max_expansion {
        if semantics != Semantics::Yandex {
            c.error(
                e.pos.or(fallback),
                "maxExpansion is Yandex's name for maxSurge: write maxSurge, or set rollout.semantics: yandex",
            );
        } else if r.max_surge.is_some() {
            c.error(
                e.pos.or(fallback),
                "maxSurge and maxExpansion are the same setting; keep one",
            );
        }
    }
    let surge_field = if r.max_surge.is_none() && r.max_expansion.is_some() {
        "maxExpansion"
    } else {
        "maxSurge"
    };
    if let Some(s) = r.surge() {
        budget_ok(c, surge_field, s, Some(MAX_SURGE_PERCENT));
    }
    if let Some(u) = &r.max_unavailable {
        budget_ok(c, "maxUnavailable", u, Some(100));
    }
    // Whole numbers only, and their limits, where the service says so.
    if matches!(semantics, Semantics::Gke | Semantics::Yandex) {
        for (field, v) in [
            (surge_field, r.surge()),
            ("maxUnavailable", r.max_unavailable.as_ref()),
        ] {
            if let Some(v) = v
                && let IntOrPercent::Percent(p) = v.value
            {
                c.error(
                    v.pos.or(fallback),
                    format!("{field}: {sem_name} takes a whole number of nodes, not {p}% (rollout.semantics: {sem_name})"),
                );
            }
        }
    }
    let int = |v: Option<&At<IntOrPercent>>| match v.map(|v| v.value) {
        Some(IntOrPercent::Int(n)) => Some(n),
        _ => None,
    };
    match semantics {
        Semantics::Gke => {
            let total = int(r.surge()).unwrap_or(1) + int(r.max_unavailable.as_ref()).unwrap_or(0);
            if total > 20 {
                let at = r
                    .surge()
                    .or(r.max_unavailable.as_ref())
                    .map_or(fallback, |v| v.pos);
                c.error(
                    at.or(fallback),
                    format!("GKE upgrades at most 20 nodes at once: maxSurge + maxUnavailable is {total} (rollout.semantics: gke)"),
                );
            }
        }
        Semantics::Yandex => {
            for (field, v) in [
                (surge_field, r.surge()),
                ("maxUnavailable", r.max_unavailable.as_ref()),
            ] {
                if let Some(v) = v
                    && int(Some(v)).is_some_and(|n| n > 100)
                {
                    c.error(
                        v.pos.or(fallback),
                        format!(
                            "{field}: Yandex allows 0 to 100, got {} (rollout.semantics: yandex)",
                            v.value
                        ),
                    );
                }
            }
        }
        Semantics::Oke => {
            if r.reimage.value
                && let Some(u) = &r.max_unavailable
                && u.is_zero()
            {
                c.error(
                    u.pos.or(fallback),
                    "with reimage (OKE's boot-volume replacement) maxUnavailable cannot be 0 (rollout.semantics: oke)",
                );
            }
        }
        Semantics::Kubernetes | Semantics::Aks => {}
    }
    // Defaults are surge 1 (AKS: 10%), unavailable 0 (OKE with reimage: 1).
    // Zero for both, written or defaulted, means no node could ever be replaced.
    let surge_zero = r.surge().is_some_and(|s| s.is_zero());
    let unavailable_default_zero = !(semantics == Semantics::Oke && r.reimage.value);
    let unavailable_zero = r
        .max_unavailable
        .as_ref()
        .map_or(unavailable_default_zero, |u| u.is_zero());
    if surge_zero && unavailable_zero {
        let at = r
            .max_unavailable
            .as_ref()
            .or(r.surge())
            .map_or(fallback, |v| v.pos);
        let how = if r.max_unavailable.is_none() {
            " (maxUnavailable defaults to 0)"
        } else {
            ""
        };
        c.error(
            at.or(fallback),
            format!("{surge_field} and maxUnavailable are both 0{how}: no node could ever be replaced; set one of them above 0"),
        );
    }
    if r.reimage.value && !surge_zero {
        let at = r.reimage.pos.or(fallback);
        c.error(
            at,
            "rollout.reimage replaces nodes in place and needs maxSurge: 0 (with maxUnavailable above 0)",
        );
    }
    if let Some(order) = &r.order
        && let TakeDownOrder::Label(key) = &order.value
        && !is_label_key(key)
    {
        c.error(
            order.pos.or(fallback),
            format!(
                "rollout.order: label {key:?} is not a Kubernetes label key (an optional DNS prefix and '/', then 1 to 63 letters, digits, '-', '_' or '.')"
            ),
        );
    }
    if let Some(m) = &r.drain.max_blocked_nodes {
        budget_ok(c, "drain.maxBlockedNodes", m, Some(100));
        if r.drain.on_timeout != OnDrainTimeout::Quarantine {
            c.error(
                m.pos.or(fallback),
                "drain.maxBlockedNodes limits quarantined nodes: it needs drain.onTimeout: quarantine",
            );
        }
    }
    if r.health.startup_timeout == Duration::ZERO {
        c.error(
            fallback,
            "rollout.health.startupTimeout must be greater than 0",
        );
    }
    if r.drain.timeout == Duration::ZERO {
        c.error(fallback, "rollout.drain.timeout must be greater than 0");
    }
    if !(1..=MAX_POOL_SIZE).contains(&r.max_failed_nodes.value) {
        c.error(
            r.max_failed_nodes.pos.or(fallback),
            format!(
                "maxFailedNodes must be 1 to {MAX_POOL_SIZE}, got {}",
                r.max_failed_nodes.value
            ),
        );
    }
    let mut previous = 0;
    for cp in &r.checkpoints {
        let p = cp.at.value.0;
        let at = cp.at.pos.or(cp.pos).or(fallback);
        if !(1..=99).contains(&p) {
            c.error(at, format!("checkpoint at {p}% must be between 1% and 99%"));
        } else if p <= previous {
            c.error(
                at,
                format!("checkpoints must be in increasing order: {p}% follows {previous}%"),
            );
        } else {
            previous = p;
        }
    }
}

/// Check disruption rules. `whole` is the pool's effective rules (after a
/// shared policy is merged in): then only how the parts fit together is
/// checked, the parts having been checked in their own documents.
fn check_rules(c: &mut Checker, d: &DisruptionRules, fallback: Pos, whole: bool) {
    let policy = d.policy.as_ref().map(|p| p.value).unwrap_or_default();
    let policy_pos = d.policy.as_ref().map_or(fallback, |p| p.pos.or(fallback));
    if whole {
        match policy {
            DisruptionPolicy::AllowDuringMaintenanceWindow if d.windows.is_empty() => c.error(
                policy_pos,
                "policy AllowDuringMaintenanceWindow needs at least one entry in \"windows\" (without one, nothing disruptive could ever run)",
            ),
            DisruptionPolicy::Allow | DisruptionPolicy::Block if !d.windows.is_empty() => c.warning(
                d.windows[0].pos.or(policy_pos),
                format!(
                    "windows are ignored with policy {policy:?}; use AllowDuringMaintenanceWindow to honour them"
                ),
            ),
            _ => {}
        }
        if let Some(u) = &d.until
            && policy != DisruptionPolicy::Block
        {
            c.warning(
                u.pos.or(policy_pos),
                format!("until is ignored with policy {policy:?}; it ends a Block freeze"),
            );
        }
        return;
    }
    if let Some(u) = &d.until
        && let Err(e) = u.value.parse::<jiff::Timestamp>()
    {
        c.error(u.pos.or(policy_pos), until_error(&u.value, &e));
    }
    for w in &d.windows {
        check_window(c, w, policy_pos);
    }
    if let Some(a) = &d.applies_to
        && a.is_empty()
    {
        c.error(
            a.pos.or(policy_pos),
            "appliesTo must name at least one change class (config, image, kubernetesVersion, repair); omit it for all of them",
        );
    }
}

fn check_window(c: &mut Checker, w: &At<Window>, fallback: Pos) {
    let at = w.pos.or(fallback);
    match (&w.start, &w.cron) {
        (None, None) => c.error(
            at,
            "a window needs \"start\" (HH:MM, with optional \"days\") or \"cron\"",
        ),
        (Some(_), Some(cron)) => c.error(
            cron.pos.or(at),
            "\"start\" and \"cron\" exclude each other; keep one",
        ),
        (None, Some(cron)) => {
            if w.days.pos.is_known() {
                c.error(
                    w.days.pos,
                    "\"days\" is for windows with \"start\"; put the days in the cron expression",
                );
            }
            if cron.split_whitespace().count() != 5 {
                c.error(
                    cron.pos.or(at),
                    format!(
                        "cron: {:?} must have five fields: minute hour day-of-month month day-of-week (e.g. \"0 22 * * 1-5\")",
                        cron.value
                    ),
                );
            } else if let Err(e) = super::values::parse_cron(cron.as_str(), "UTC") {
                c.error(cron.pos.or(at), format!("cron: {:?}: {e}", cron.value));
            }
        }
        (Some(_), None) => {}
    }
    if w.days.is_empty() {
        c.error(
            w.days.pos.or(at),
            "days must not be empty (omit it for every day)",
        );
    }
    let dur = w.duration.value.as_std();
    if dur.is_zero() {
        c.error(
            w.duration.pos.or(at),
            "window duration must be greater than 0",
        );
    } else if dur > std::time::Duration::from_secs(7 * 24 * 3600) {
        c.error(
            w.duration.pos.or(at),
            format!("window duration {} is longer than 7 days", w.duration.value),
        );
    }
    check_timezone(c, &w.timezone, at);
}

fn check_timezone(c: &mut Checker, tz: &At<String>, fallback: Pos) {
    if jiff::tz::db().get(tz.as_str()).is_ok() {
        return;
    }
    let names: Vec<String> = jiff::tz::db().available().map(|n| n.to_string()).collect();
    c.error(
        tz.pos.or(fallback),
        format!(
            "unknown time zone {:?}: expected an IANA name such as \"Europe/Berlin\" or \"UTC\"{}",
            tz.value,
            did_you_mean(tz.as_str(), names.iter().map(String::as_str))
        ),
    );
}

fn check_references(config: &Config, diags: &mut Vec<Diagnostic>) {
    let provider_names: Vec<&str> = config.providers.keys().map(String::as_str).collect();
    let cluster_names: Vec<&str> = config.clusters.keys().map(String::as_str).collect();
    for entry in config.pools.values() {
        let spec = &entry.doc.spec;
        let mut c = Checker {
            file: &entry.file,
            diags,
        };
        let r = &spec.provider_ref;
        match config.providers.get(r.as_str()) {
            None => c.error(
                r.pos.or(spec.pos),
                dangling("providerRef", "Provider", r.as_str(), &provider_names),
            ),
            Some(p) => check_provider_fit(&mut c, spec, &p.doc),
        }
        if let Some(r) = &spec.cluster_ref
            && !config.clusters.contains_key(r.as_str())
        {
            c.error(
                r.pos.or(spec.pos),
                dangling("clusterRef", "Cluster", r.as_str(), &cluster_names),
            );
        }
    }
}

/// The words of every `dangling` message, so that a reader of diagnostics
/// can tell a reference to a document the files loaded do not hold.
const DANGLING: &str = "does not name a";

/// Whether `message` says a reference names no loaded document: what files
/// checked without the rest of their directory typically fail on.
pub fn is_dangling_reference(message: &str) -> bool {
    message.contains(DANGLING)
}

fn dangling(field: &str, kind: &str, name: &str, known: &[&str]) -> String {
    let known_text = if known.is_empty() {
        format!("no {kind} is defined")
    } else {
        format!("defined: {}", one_of(known))
    };
    format!(
        "{field} {name:?} {DANGLING} {kind} ({known_text}){}",
        did_you_mean(name, known.iter().copied())
    )
}

/// Provider-specific pool settings must match the provider the pool uses.
fn check_provider_fit(c: &mut Checker, spec: &At<NodePoolSpec>, provider: &ProviderDoc) {
    let ty = provider.spec.type_name();
    let name = provider.metadata.name.as_str();
    let is_aws = matches!(provider.spec.value, ProviderSpec::Aws(_));
    let misplaced = |c: &mut Checker, field: &str, pos: Pos| {
        c.error(
            pos.or(spec.pos),
            format!(
                "{field} is only for providers of type aws, but provider {name:?} is of type {ty}"
            ),
        );
    };
    if !is_aws {
        if let Some(t) = &spec.template.aws {
            misplaced(c, "template.aws", t.pos);
        }
        if let Some(a) = &spec.aws {
            misplaced(c, "aws", a.pos);
        }
    } else {
        if spec.template.aws.is_none() {
            c.error(
                spec.pos,
                format!(
                    "provider {name:?} is of type aws: template.aws.launchTemplate is required"
                ),
            );
        }
        // template.image and template.instanceType make a launch template
        // version of the pool's own (from the version the file names).
    }
    if !spec.template.plugin.is_empty() && !matches!(provider.spec.value, ProviderSpec::Http(_)) {
        c.error(
            spec.pos,
            format!("template.plugin is only for providers of type http, but provider {name:?} is of type {ty}"),
        );
    }
}
