//! The conformance kit (`poolwright plugin check URL`): a scripted battery
//! against a live plug-in, in pools it creates under a prefix and deletes
//! afterwards, like CSI's sanity suite or Terraform's acceptance tests. Every
//! check goes through the same client poolwright uses (so what passes here is
//! what poolwright will see), plus raw requests for what the client never
//! sends on purpose: a repeated idempotency key, a malformed body.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;

use super::transport::{Answer, Call};
use super::wire::{self, ProblemType};
use super::{Http, valid_node_id};
use crate::model::{Bounds, InPlace, NodeState, NodeTemplate, ObservedPool, OpKey, PoolSpec};
use crate::provider::{ErrorKind, Provider};

/// What the battery needs beyond the plug-in's address.
pub struct Options {
    /// Pool names are `PREFIX-a`, `PREFIX-b`, `PREFIX-missing`.
    pub prefix: String,
    /// The template pools start on, and the one a template change moves to.
    pub template: NodeTemplate,
    pub new_template: NodeTemplate,
    /// How long nodes may take to appear, become healthy or go.
    pub timeout: Duration,
    /// Whether requests carry a token (then a request without one must be refused).
    pub has_token: bool,
    /// A size the plug-in must refuse with 403 `quota-exceeded` (there is no
    /// way to find one from outside; the quota check is skipped without it).
    pub quota_size: Option<u32>,
    /// An image channel the plug-in serves (`GET /v1/channels/NAME/images`);
    /// without it, only an unknown channel's 404 is checked.
    pub channel: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    pub check: String,
    pub verdict: Verdict,
    /// What was seen: for a failure, why; for a pass, a short note.
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<wire::Capabilities>,
    pub results: Vec<CheckResult>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.failed == 0
    }

    /// The pass/fail table.
    pub fn render(&self) -> String {
        let width = self
            .results
            .iter()
            .map(|r| r.check.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = format!("poolwright plugin check {}\n", self.url);
        if let Some(c) = &self.plugin {
            out.push_str(&format!(
                "plug-in {} {} (reimage {}, describe batch {}, template fields {})\n",
                c.name,
                c.version.as_deref().unwrap_or(""),
                c.reimage,
                c.describe_batch_size,
                c.template_fields
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push('\n');
        out.push_str(&format!("  {:<width$}  RESULT  DETAIL\n", "CHECK"));
        for r in &self.results {
            let v = match r.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "skip",
            };
            out.push_str(&format!("  {:<width$}  {v:<6}  {}\n", r.check, r.detail));
        }
        out.push_str(&format!(
            "\n{} passed, {} failed, {} skipped\n",
            self.passed, self.failed, self.skipped
        ));
        out
    }
}

/// Why a check failed: its row's detail.
#[derive(Debug)]
struct Failed(String);

impl From<String> for Failed {
    fn from(why: String) -> Failed {
        Failed(why)
    }
}

impl From<&str> for Failed {
    fn from(why: &str) -> Failed {
        Failed(why.to_string())
    }
}

/// A check's outcome: what was seen when it passed, why when it failed.
type Finding = Result<String, Failed>;

struct Battery<'a> {
    http: &'a Http,
    opts: &'a Options,
    results: Vec<CheckResult>,
    caps: Option<wire::Capabilities>,
}

fn key(name: &str) -> OpKey {
    // Unique per run, so a second run is not answered from the first's record.
    let now = jiff::Timestamp::now().as_nanosecond().to_string();
    OpKey::derive(&["plugin-check", name, &now])
}

fn live(p: &ObservedPool) -> Vec<&crate::model::Node> {
    p.nodes
        .iter()
        .filter(|n| n.state != NodeState::Terminating)
        .collect()
}

impl Battery<'_> {
    fn record(&mut self, check: &str, outcome: Finding) -> bool {
        let (verdict, detail) = match outcome {
            Ok(d) => (Verdict::Pass, d),
            Err(Failed(d)) => (Verdict::Fail, d),
        };
        let passed = verdict == Verdict::Pass;
        self.results.push(CheckResult {
            check: check.to_string(),
            verdict,
            detail,
        });
        passed
    }

    fn skip(&mut self, check: &str, why: &str) {
        self.results.push(CheckResult {
            check: check.to_string(),
            verdict: Verdict::Skip,
            detail: why.to_string(),
        });
    }

    fn pool(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.opts.prefix)
    }

    async fn describe(&self, pool: &str) -> Result<Option<ObservedPool>, Failed> {
        self.http
            .describe_pools(&[pool.to_string()])
            .await
            .map(|mut v| v.pop())
            .map_err(|e| Failed(e.to_string()))
    }

    /// Look until `ok` holds of the pool (or the timeout passes).
    async fn wait_for(
        &self,
        pool: &str,
        what: &str,
        ok: impl Fn(Option<&ObservedPool>) -> bool,
    ) -> Result<Option<ObservedPool>, Failed> {
        let deadline = std::time::Instant::now() + self.opts.timeout;
        let poll = self
            .http
            .capabilities()
            .poll_interval
            .min(Duration::from_secs(2));
        loop {
            let seen = self.describe(pool).await?;
            if ok(seen.as_ref()) {
                return Ok(seen);
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "{what}: not seen within {:?}; last describe: {}",
                    self.opts.timeout,
                    summary(seen.as_ref())
                )
                .into());
            }
            tokio::time::sleep(poll).await;
        }
    }

    async fn raw(&self, call: &Call<'_>) -> Result<Answer, Failed> {
        self.http
            .transport()
            .exchange(call, true)
            .await
            .map_err(|e| Failed(e.to_string()))
    }

    /// Delete what an earlier, interrupted run left behind.
    async fn clean(&self) {
        let names: Vec<String> = ["a", "b", "missing"].iter().map(|s| self.pool(s)).collect();
        if let Ok(pools) = self.http.describe_pools(&names).await {
            for p in pools {
                let _ = self.http.delete_pool(&p.name, &key("clean")).await;
                let _ = self.wait_for(&p.name, "cleanup", |o| o.is_none()).await;
            }
        }
    }

    fn spec(&self, name: &str, size: u32) -> PoolSpec {
        PoolSpec {
            name: name.to_string(),
            size,
            autoscaling: None,
            template: self.opts.template.clone(),
            in_place: InPlace {
                labels: [("poolwright.io/check".to_string(), "yes".to_string())].into(),
                ..InPlace::default()
            },
            placement: Default::default(),
        }
    }
}

fn summary(p: Option<&ObservedPool>) -> String {
    match p {
        None => "absent".into(),
        Some(p) => {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|n| format!("{} {:?} {}", n.id, n.state, n.template))
                .collect();
            format!("size {}, nodes [{}]", p.size, nodes.join(", "))
        }
    }
}

/// Run the battery. Pools are deleted at the end whatever happened.
pub async fn run(http: &Http, opts: &Options) -> Report {
    let mut b = Battery {
        http,
        opts,
        results: Vec::new(),
        caps: None,
    };
    let proceed = capabilities(&mut b).await;
    if proceed {
        channels(&mut b).await;
        b.clean().await;
        battery(&mut b).await;
        let a = b.pool("a");
        if let Ok(Some(_)) = b.describe(&a).await {
            let del = delete(&b, &a).await;
            b.record("delete", del);
            let again = match http.delete_pool(&a, &key("delete-again")).await {
                Err(e) if e.kind == ErrorKind::NotFound => {
                    Ok("deleting it again answers not-found".to_string())
                }
                Err(e) => Err(format!("deleting a deleted pool: {e} (want not-found)").into()),
                Ok(()) => Err("deleting a deleted pool succeeded (want not-found)".into()),
            };
            b.record("delete-missing", again);
        }
        let bp = b.pool("b");
        if let Ok(Some(_)) = b.describe(&bp).await {
            let r = idempotent_delete(&b, &bp).await;
            b.record("idempotent-delete", r);
        }
    }
    let count = |v: Verdict| b.results.iter().filter(|r| r.verdict == v).count();
    Report {
        url: http.base_url().to_string(),
        passed: count(Verdict::Pass),
        failed: count(Verdict::Fail),
        skipped: count(Verdict::Skip),
        plugin: b.caps.clone(),
        results: b.results,
    }
}

/// The channel endpoint: a channel it does not know answers not-found; the
/// one named (`--channel`) answers images with ids and RFC 3339 times.
async fn channels(b: &mut Battery<'_>) {
    let source = crate::spec::types::ChannelSource::Http(crate::spec::types::ProviderImageSource {
        provider: crate::spec::At::bare(b.http.name().to_string()),
    });
    let missing = b.pool("missing-channel");
    let outcome = match b.http.channel_images(&missing, &source).await {
        Err(e) if e.kind == ErrorKind::NotFound => Ok("an unknown channel answers not-found".into()),
        Err(e) => Err(format!("GET /v1/channels/{missing}/images: {e} (want 404 not-found)").into()),
        Ok(images) => Err(format!(
            "GET /v1/channels/{missing}/images answered {} image(s) for a channel that does not exist (want 404 not-found)",
            images.len()
        )
        .into()),
    };
    b.record("channel-missing", outcome);
    let Some(channel) = b.opts.channel.clone() else {
        b.skip(
            "channel-images",
            "no --channel named: the plug-in is not checked as an image source",
        );
        return;
    };
    let outcome = match b.http.channel_images(&channel, &source).await {
        Ok(images) if images.is_empty() => Err(format!(
            "channel {channel} offers no image: a source poolwright follows must offer at least one"
        )
        .into()),
        Ok(images) => {
            let newest = images.iter().max_by_key(|r| r.released).expect("not empty");
            Ok(format!(
                "{} image(s); the newest is {} (released {})",
                images.len(),
                newest.image,
                newest.released
            ))
        }
        Err(e) => Err(e.to_string().into()),
    };
    b.record("channel-images", outcome);
}

async fn capabilities(b: &mut Battery<'_>) -> bool {
    let outcome = match b.http.plugin_capabilities().await {
        Ok(c) => {
            let fields: BTreeSet<_> = c.template_fields.iter().collect();
            let needed: Vec<&str> = crate::model::TemplateField::set_in(&b.opts.template)
                .into_iter()
                .chain(crate::model::TemplateField::set_in(&b.opts.new_template))
                .filter(|f| !fields.contains(f))
                .map(|f| f.as_str())
                .collect();
            b.caps = Some(c.clone());
            if needed.is_empty() {
                Ok(format!("protocol {}, {}", c.protocol, c.name))
            } else {
                Err(format!(
                    "the check's templates set {} which the plug-in does not act on; pass --template and --new-template it understands",
                    needed.join(", ")
                )
                .into())
            }
        }
        Err(e) => Err(e.to_string().into()),
    };
    b.record("capabilities", outcome)
}

async fn battery(b: &mut Battery<'_>) {
    let a = b.pool("a");
    let created = create(b, &a).await;
    if !b.record("create-pool", created) {
        return;
    }
    let seen = describe_created(b, &a).await;
    b.record("describe-after-create", seen);
    let batch = describe_batch(b, &a).await;
    b.record("describe-batch", batch);
    let r = describe_batch_limit(b, &a).await;
    b.record("describe-batch-limit", r);
    let r = adopt(b, &a).await;
    b.record("adopt", r);
    let r = duplicate_pool(b, &a).await;
    b.record("create-pool-duplicate", r);
    let r = resize(b, &a, 3).await;
    b.record("grow", r);
    let r = resize(b, &a, 2).await;
    b.record("shrink", r);
    let r = create_nodes(b, &a).await;
    b.record("create-nodes", r);
    let r = terminate_chosen(b, &a, true).await;
    b.record("terminate-chosen-decrement", r);
    let r = terminate_chosen(b, &a, false).await;
    b.record("terminate-chosen-replace", r);
    let r = template_change(b, &a).await;
    b.record("template-change", r);
    let r = in_place(b, &a).await;
    b.record("update-in-place", r);
    let r = bounds(b, &a).await;
    b.record("bounds", r);
    if b.caps.as_ref().is_some_and(|c| c.reimage) {
        let r = reimage(b, &a).await;
        b.record("reimage", r);
    } else {
        let r = reimage_unsupported(b, &a).await;
        b.record("reimage-unsupported", r);
    }
    if let Some(size) = b.opts.quota_size {
        let r = quota(b, &a, size).await;
        b.record("quota-exceeded", r);
    } else {
        b.skip(
            "quota-exceeded",
            "no size the plug-in must refuse given (--quota-size)",
        );
    }
    let bp = b.pool("b");
    let r = idempotent_create_pool(b, &bp).await;
    b.record("idempotent-create-pool", r);
    let r = idempotent_create_nodes(b, &bp).await;
    b.record("idempotent-create-nodes", r);
    let r = idempotent_terminate(b, &bp).await;
    b.record("idempotent-terminate", r);
    let r = idempotent_set_size(b, &bp).await;
    b.record("idempotent-set-size", r);
    let r = idempotent_set_template(b, &bp).await;
    b.record("idempotent-set-template", r);
    let r = key_reuse_other_body(b, &bp).await;
    b.record("key-reuse-other-body", r);
    let r = concurrent_duplicate(b, &bp).await;
    b.record("idempotent-concurrent-duplicate", r);
    let r = problem_on_bad_request(b).await;
    b.record("problem-on-bad-request", r);
    let r = not_found(b).await;
    b.record("not-found-pool", r);
    if b.opts.has_token {
        let r = unauthorized(b).await;
        b.record("token-required", r);
    } else {
        b.skip(
            "token-required",
            "no token given (--token-file/--token-env)",
        );
    }
}

async fn create(b: &Battery<'_>, pool: &str) -> Finding {
    b.http
        .create_pool(&b.spec(pool, 2), &key("create-a"))
        .await
        .map(|()| format!("{pool} at 2 nodes"))
        .map_err(|e| Failed(e.to_string()))
}

async fn describe_created(b: &Battery<'_>, pool: &str) -> Finding {
    let want = b.opts.template.hash();
    let spec = b.spec(pool, 2);
    let p = b
        .wait_for(pool, "2 healthy nodes on the template", |o| {
            o.is_some_and(|p| {
                let l = live(p);
                l.len() == 2
                    && l.iter()
                        .all(|n| n.state == NodeState::Healthy && n.template == want)
            })
        })
        .await?
        .ok_or("absent")?;
    if p.size != 2 {
        return Err(format!("size {} (want 2)", p.size).into());
    }
    if p.template != b.opts.template {
        return Err(format!(
            "the template is not returned verbatim: sent {}, got {}",
            serde_json::to_string(&b.opts.template).unwrap_or_default(),
            serde_json::to_string(&p.template).unwrap_or_default()
        )
        .into());
    }
    if p.in_place != spec.in_place {
        return Err("inPlace attributes given at creation are not returned".into());
    }
    Ok(format!(
        "size 2, 2 healthy nodes stamped {want}, template verbatim"
    ))
}

async fn describe_batch(b: &Battery<'_>, pool: &str) -> Finding {
    let missing = b.pool("missing");
    let answer = b
        .http
        .describe_pools(&[pool.to_string(), missing.clone()])
        .await
        .map_err(|e| e.to_string())?;
    let names: Vec<&str> = answer.iter().map(|p| p.name.as_str()).collect();
    if names == [pool] {
        Ok(format!(
            "asked for {pool} and {missing}: only {pool} answered"
        ))
    } else {
        Err(format!("asked for {pool} and {missing}, answered {names:?}").into())
    }
}

/// Exactly `describeBatchSize` names are answered; one more is refused as
/// `invalid`, not silently cut short.
async fn describe_batch_limit(b: &Battery<'_>, pool: &str) -> Finding {
    let batch = b.caps.as_ref().map_or(1, |c| c.describe_batch_size) as usize;
    let mut names = vec![pool.to_string()];
    names.extend((1..=batch).map(|i| format!("{}-{i}", b.pool("missing"))));
    let describe = |names: &[String]| {
        Call::query(
            format!("Describe({} pools)", names.len()),
            vec!["v1", "describe"],
            &wire::DescribeRequest {
                pools: names.to_vec(),
            },
        )
    };
    let full = b.raw(&describe(&names[..batch])).await?;
    if !full.status.is_success() {
        return Err(format!(
            "describing describeBatchSize ({batch}) pools answered {}",
            full.status
        )
        .into());
    }
    let over = b.raw(&describe(&names)).await?;
    problem_with(
        &over,
        &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY],
        ProblemType::Invalid,
    )
    .map(|seen| {
        format!(
            "{batch} names answered; {} names refused: {seen}",
            batch + 1
        )
    })
}

/// Adopting a pool marks it managed (again: the check created it); a
/// missing pool is not-found.
async fn adopt(b: &Battery<'_>, pool: &str) -> Finding {
    b.http
        .adopt_pool(pool, &key("adopt"))
        .await
        .map_err(|e| format!("adopting {pool}: {e}"))?;
    match b
        .http
        .adopt_pool(&b.pool("missing"), &key("adopt-missing"))
        .await
    {
        Err(e) if e.kind == ErrorKind::NotFound => {
            Ok(format!("{pool} adopted; a missing pool answers not-found"))
        }
        Err(e) => Err(format!("adopting a missing pool: {e} (want not-found)").into()),
        Ok(()) => Err("adopting a missing pool succeeded (want not-found)".into()),
    }
}

/// Creating a pool whose name exists, under a new key, is a conflict.
async fn duplicate_pool(b: &Battery<'_>, pool: &str) -> Finding {
    let spec = b.spec(pool, 1);
    let k = key("create-duplicate");
    let call = Call::mutate(
        "CreatePool".into(),
        Method::POST,
        vec!["v1", "pools"],
        Some(&wire::CreatePoolRequest {
            template_hash: spec.template.hash(),
            pool: spec,
        }),
        &k,
    );
    let a = b.raw(&call).await?;
    problem_with(&a, &[StatusCode::CONFLICT], ProblemType::Conflict)
}

/// A plug-in that does not reimage says so with 501, not by acting.
async fn reimage_unsupported(b: &Battery<'_>, pool: &str) -> Finding {
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    let node = live(&p)
        .first()
        .map(|n| n.id.to_string())
        .ok_or("no node to ask a reimage of")?;
    let k = key("reimage-unsupported");
    let call = Call::mutate(
        format!("ReimageNode({pool}, {node})"),
        Method::POST,
        vec!["v1", "pools", pool, "nodes", &node, "reimage"],
        Some(&wire::ReimageNodeRequest {
            template_hash: b.opts.template.hash(),
        }),
        &k,
    );
    let a = b.raw(&call).await?;
    problem_with(&a, &[StatusCode::NOT_IMPLEMENTED], ProblemType::Unsupported)
}

/// Growing to a size over the quota is refused with 403 `quota-exceeded`,
/// and nothing is launched.
async fn quota(b: &Battery<'_>, pool: &str, size: u32) -> Finding {
    let before = b.describe(pool).await?.ok_or("pool absent")?;
    let k = key("quota");
    let call = Call::mutate(
        "SetSize".into(),
        Method::PUT,
        vec!["v1", "pools", pool, "size"],
        Some(&wire::SetSizeRequest { size }),
        &k,
    );
    let a = b.raw(&call).await?;
    if a.status.is_success() {
        // Not refused: the size was really asked for. Put it back before
        // anything else runs against the pool.
        let _ = b.http.set_size(pool, before.size, &key("quota-undo")).await;
        return Err(format!(
            "size {size} was accepted ({}), not refused with 403 quota-exceeded; the pool was set back to {}",
            a.status, before.size
        )
        .into());
    }
    let seen = problem_with(&a, &[StatusCode::FORBIDDEN], ProblemType::QuotaExceeded)?;
    let after = b.describe(pool).await?.ok_or("pool absent")?;
    if after.size != before.size || live(&after).len() > live(&before).len() {
        return Err(format!(
            "refused, but the pool went from {} to {}",
            summary(Some(&before)),
            summary(Some(&after))
        )
        .into());
    }
    Ok(format!("size {size}: {seen}; nothing launched"))
}

async fn resize(b: &Battery<'_>, pool: &str, to: u32) -> Finding {
    b.http
        .set_size(pool, to, &key(&format!("size-{to}")))
        .await
        .map_err(|e| e.to_string())?;
    b.wait_for(pool, &format!("size {to} with {to} live nodes"), |o| {
        o.is_some_and(|p| p.size == to && live(p).len() == to as usize)
    })
    .await?;
    Ok(format!("size {to}, {to} live nodes"))
}

/// Launch one node; its id from the answer, or (for a platform that
/// assigns ids later) the one new node describe shows.
async fn launch_one(b: &Battery<'_>, pool: &str, name: &str) -> Result<String, Failed> {
    let before = b.describe(pool).await?.ok_or("pool absent")?;
    let known: BTreeSet<String> = before.nodes.iter().map(|n| n.id.to_string()).collect();
    let want = before.size + 1;
    let ids = b
        .http
        .create_nodes(pool, 1, want, &key(name))
        .await
        .map_err(|e| e.to_string())?;
    if ids.len() > 1 {
        return Err(format!("asked for 1 node, got ids {ids:?}").into());
    }
    let p = b
        .wait_for(pool, &format!("size {want} with one new live node"), |o| {
            o.is_some_and(|p| {
                p.size == want
                    && live(p)
                        .iter()
                        .any(|n| !known.contains(&*n.id) && ids.iter().all(|i| **i == *n.id))
            })
        })
        .await?
        .ok_or("pool absent")?;
    let fresh: Vec<String> = live(&p)
        .iter()
        .filter(|n| !known.contains(&*n.id))
        .map(|n| n.id.to_string())
        .collect();
    match fresh.as_slice() {
        [one] => Ok(one.clone()),
        more => Err(format!("asked for 1 node, {} appeared: {more:?}", more.len()).into()),
    }
}

async fn create_nodes(b: &Battery<'_>, pool: &str) -> Finding {
    let id = launch_one(b, pool, "create-nodes").await?;
    Ok(format!("launched {id}; size 3"))
}

async fn terminate_chosen(b: &Battery<'_>, pool: &str, decrement: bool) -> Finding {
    let before = b.describe(pool).await?.ok_or("pool absent")?;
    let nodes = live(&before);
    let Some(victim) = nodes.last().map(|n| n.id.to_string()) else {
        return Err("no live node to terminate".into());
    };
    let others: Vec<String> = nodes
        .iter()
        .filter(|n| *n.id != *victim)
        .map(|n| n.id.to_string())
        .collect();
    let size = if decrement {
        before.size.saturating_sub(1)
    } else {
        before.size
    };
    b.http
        .terminate_node(
            pool,
            &victim,
            decrement,
            &key(&format!("terminate-{victim}")),
        )
        .await
        .map_err(|e| e.to_string())?;
    let after = b
        .wait_for(pool, &format!("{victim} gone and {size} live nodes"), |o| {
            o.is_some_and(|p| {
                let l = live(p);
                p.size == size && l.len() == size as usize && l.iter().all(|n| *n.id != *victim)
            })
        })
        .await?
        .ok_or("pool absent")?;
    let lost: Vec<&String> = others
        .iter()
        .filter(|id| !live(&after).iter().any(|n| *n.id == **id))
        .collect();
    if !lost.is_empty() {
        return Err(format!(
            "terminating {victim} also took {lost:?} (only the chosen node may go)"
        )
        .into());
    }
    Ok(if decrement {
        format!("{victim} gone, no other node touched, size {size}")
    } else {
        format!("{victim} gone and replaced, no other node touched, size {size}")
    })
}

async fn template_change(b: &Battery<'_>, pool: &str) -> Finding {
    let old = b.opts.template.hash();
    let new = b.opts.new_template.hash();
    let before = b.describe(pool).await?.ok_or("pool absent")?;
    let old_nodes: Vec<String> = live(&before).iter().map(|n| n.id.to_string()).collect();
    b.http
        .set_template(pool, &b.opts.new_template, &key("template"))
        .await
        .map_err(|e| e.to_string())?;
    let id = launch_one(b, pool, "create-after-template").await?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if p.template != b.opts.new_template {
        return Err("the new template is not returned verbatim".into());
    }
    let fresh = p.nodes.iter().find(|n| *n.id == *id).ok_or("vanished")?;
    if fresh.template != new {
        return Err(format!("the new node {id} carries {} (want {new})", fresh.template).into());
    }
    for n in p
        .nodes
        .iter()
        .filter(|n| old_nodes.iter().any(|o| **o == *n.id))
    {
        if n.template != old {
            return Err(format!(
                "running node {} changed its hash to {} (running nodes keep theirs)",
                n.id, n.template
            )
            .into());
        }
    }
    // Back to two nodes for the checks that follow.
    b.http
        .terminate_node(pool, &id, true, &key("terminate-after-template"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "new node {id} stamped {new}; running nodes kept {old}"
    ))
}

async fn in_place(b: &Battery<'_>, pool: &str) -> Finding {
    let attrs = InPlace {
        labels: [("tier".to_string(), "check".to_string())].into(),
        annotations: [("note".to_string(), "conformance".to_string())].into(),
        taints: vec![crate::model::Taint {
            key: "dedicated".into(),
            value: Some("check".into()),
            effect: crate::spec::types::TaintEffect::NoSchedule,
        }],
        tags: [("owner".to_string(), "poolwright".to_string())].into(),
    };
    b.http
        .update_in_place(pool, &attrs, &key("in-place"))
        .await
        .map_err(|e| e.to_string())?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if p.in_place == attrs {
        Ok("labels, annotations, taints and tags read back as set".into())
    } else {
        Err(format!(
            "read back {} (want {})",
            serde_json::to_string(&p.in_place).unwrap_or_default(),
            serde_json::to_string(&attrs).unwrap_or_default()
        )
        .into())
    }
}

async fn bounds(b: &Battery<'_>, pool: &str) -> Finding {
    let want = Some(Bounds { min: 1, max: 5 });
    b.http
        .set_bounds(pool, want, &key("bounds"))
        .await
        .map_err(|e| e.to_string())?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if p.autoscaling != want {
        return Err(format!("set [1, 5], read back {:?}", p.autoscaling).into());
    }
    b.http
        .set_bounds(pool, None, &key("bounds-clear"))
        .await
        .map_err(|e| e.to_string())?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if p.autoscaling.is_some() {
        return Err(format!("cleared, read back {:?}", p.autoscaling).into());
    }
    Ok("set [1, 5] and cleared".into())
}

async fn reimage(b: &Battery<'_>, pool: &str) -> Finding {
    let new = b.opts.new_template.hash();
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    let node = live(&p)
        .iter()
        .find(|n| n.template != new)
        .map(|n| n.id.to_string())
        .ok_or("no node on the old template to reimage")?;
    b.http
        .reimage_node(pool, &node, &key("reimage"))
        .await
        .map_err(|e| e.to_string())?;
    b.wait_for(pool, &format!("{node} healthy on {new}"), |o| {
        o.is_some_and(|p| {
            p.nodes
                .iter()
                .any(|n| *n.id == *node && n.template == new && n.state == NodeState::Healthy)
        })
    })
    .await?;
    Ok(format!("{node} kept its id and came back on {new}"))
}

/// Send `call` twice; both must succeed.
async fn twice(b: &Battery<'_>, call: &Call<'_>) -> Result<(Answer, Answer), Failed> {
    let first = b.raw(call).await?;
    let second = b.raw(call).await?;
    for (i, a) in [&first, &second].iter().enumerate() {
        if !a.status.is_success() {
            return Err(format!(
                "{} attempt answered {}: {}",
                if i == 0 { "the first" } else { "the repeated" },
                a.status,
                String::from_utf8_lossy(&a.body)
            )
            .into());
        }
    }
    Ok((first, second))
}

async fn idempotent_create_pool(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-create-pool");
    let body = wire::CreatePoolRequest {
        pool: b.spec(pool, 1),
        template_hash: b.opts.template.hash(),
    };
    let call = Call::mutate(
        "CreatePool".into(),
        Method::POST,
        vec!["v1", "pools"],
        Some(&body),
        &k,
    );
    twice(b, &call).await?;
    b.wait_for(pool, "one pool of 1 live node", |o| {
        o.is_some_and(|p| p.size == 1 && live(p).len() == 1)
    })
    .await?;
    Ok("the same key twice: one pool, one node".into())
}

async fn idempotent_create_nodes(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-create-nodes");
    let call = Call::mutate(
        "CreateNodes".into(),
        Method::POST,
        vec!["v1", "pools", pool, "nodes"],
        Some(&wire::CreateNodesRequest { count: 1, size: 2 }),
        &k,
    );
    let (first, second) = twice(b, &call).await?;
    let ids = |a: &Answer| -> Result<Vec<String>, Failed> {
        serde_json::from_slice::<wire::CreateNodesResponse>(&a.body)
            .map(|r| r.nodes)
            .map_err(|e| Failed(format!("answer is not a CreateNodesResponse: {e}")))
    };
    let (a, z) = (ids(&first)?, ids(&second)?);
    if a.len() > 1 {
        return Err(format!("asked for 1 node, got ids {a:?}").into());
    }
    if a != z {
        return Err(format!("the repeated request answered other ids: {a:?} then {z:?}").into());
    }
    if a.iter().any(|id| !valid_node_id(id)) {
        return Err(format!("invalid node ids {a:?}").into());
    }
    b.wait_for(pool, "size 2 with 2 live nodes", |o| {
        o.is_some_and(|p| p.size == 2 && live(p).len() == 2)
    })
    .await?;
    // Nothing more appears later either.
    tokio::time::sleep(
        b.http
            .capabilities()
            .poll_interval
            .min(Duration::from_secs(2)),
    )
    .await;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if p.size != 2 || live(&p).len() != 2 {
        return Err(format!("acted twice: {}", summary(Some(&p))).into());
    }
    Ok(format!(
        "the same key twice: one node ({}), same answer",
        a.join(", ")
    ))
}

async fn idempotent_terminate(b: &Battery<'_>, pool: &str) -> Finding {
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    let victim = live(&p)
        .first()
        .map(|n| n.id.to_string())
        .ok_or("no node")?;
    let k = key("idem-terminate");
    let call = Call::mutate(
        "TerminateNode".into(),
        Method::POST,
        vec!["v1", "pools", pool, "nodes", &victim, "terminate"],
        Some(&wire::TerminateNodeRequest { decrement: true }),
        &k,
    );
    twice(b, &call).await?;
    b.wait_for(pool, "size 1 with 1 live node", |o| {
        o.is_some_and(|p| p.size == 1 && live(p).len() == 1)
    })
    .await?;
    Ok(format!(
        "terminate {victim} with decrement, the same key twice: size dropped once (2 -> 1)"
    ))
}

async fn idempotent_set_size(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-size");
    let call = Call::mutate(
        "SetSize".into(),
        Method::PUT,
        vec!["v1", "pools", pool, "size"],
        Some(&wire::SetSizeRequest { size: 2 }),
        &k,
    );
    twice(b, &call).await?;
    b.wait_for(pool, "size 2 with 2 live nodes", |o| {
        o.is_some_and(|p| p.size == 2 && live(p).len() == 2)
    })
    .await?;
    Ok("the same key twice: size 2".into())
}

/// The template set twice under one key: the template is the new one, and
/// the repeat neither launches nor replaces a node.
async fn idempotent_set_template(b: &Battery<'_>, pool: &str) -> Finding {
    let before = b.describe(pool).await?.ok_or("pool absent")?;
    let ids: Vec<String> = live(&before).iter().map(|n| n.id.to_string()).collect();
    let k = key("idem-template");
    let call = Call::mutate(
        "SetTemplate".into(),
        Method::PUT,
        vec!["v1", "pools", pool, "template"],
        Some(&wire::SetTemplateRequest {
            template: b.opts.new_template.clone(),
            template_hash: b.opts.new_template.hash(),
        }),
        &k,
    );
    twice(b, &call).await?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    let now: Vec<String> = live(&p).iter().map(|n| n.id.to_string()).collect();
    if p.template != b.opts.new_template {
        return Err("the template set twice is not the one sent".into());
    }
    if now != ids {
        return Err(format!(
            "nodes changed: {ids:?} then {now:?} (setting a template replaces none)"
        )
        .into());
    }
    Ok("the same key twice: the new template, the same nodes".into())
}

/// A pool deleted twice under one key: both answers succeed (the repeat is
/// the first answer replayed, not a not-found), and the pool is gone.
async fn idempotent_delete(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-delete");
    let call = Call::mutate(
        "DeletePool".into(),
        Method::DELETE,
        vec!["v1", "pools", pool],
        None::<&()>,
        &k,
    );
    twice(b, &call).await?;
    b.wait_for(pool, "the pool gone", |o| o.is_none()).await?;
    Ok("the same key twice: both answered, the pool gone".into())
}

/// A key is bound to its request: the same key with another body is refused.
async fn key_reuse_other_body(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-reuse");
    let first = Call::mutate(
        "SetSize".into(),
        Method::PUT,
        vec!["v1", "pools", pool, "size"],
        Some(&wire::SetSizeRequest { size: 2 }),
        &k,
    );
    let a = b.raw(&first).await?;
    if !a.status.is_success() {
        return Err(format!("the first request answered {}", a.status).into());
    }
    let other = Call::mutate(
        "SetSize".into(),
        Method::PUT,
        vec!["v1", "pools", pool, "size"],
        Some(&wire::SetSizeRequest { size: 3 }),
        &k,
    );
    let z = b.raw(&other).await?;
    let p = b.describe(pool).await?.ok_or("pool absent")?;
    if z.status.is_client_error() && p.size == 2 {
        Ok(format!("refused with {}", z.status.as_u16()))
    } else {
        Err(format!(
            "the same key with another body answered {} and the size is {} (want a 422 and size 2)",
            z.status, p.size
        )
        .into())
    }
}

/// The same request under the same key twice at once (a retry that
/// overtakes the first attempt): one node, and both get its answer (one may
/// first be told, 409 with Retry-After, that the key is in progress).
async fn concurrent_duplicate(b: &Battery<'_>, pool: &str) -> Finding {
    let k = key("idem-concurrent");
    let call = Call::mutate(
        "CreateNodes".into(),
        Method::POST,
        vec!["v1", "pools", pool, "nodes"],
        Some(&wire::CreateNodesRequest { count: 1, size: 3 }),
        &k,
    );
    let (x, y) = tokio::join!(b.raw(&call), b.raw(&call));
    let mut answers = Vec::new();
    for a in [x?, y?] {
        let mut a = a;
        let mut waited = 0;
        while a.status == StatusCode::CONFLICT && a.retry_after.is_some() && waited < 30 {
            tokio::time::sleep(
                a.retry_after
                    .unwrap_or_default()
                    .max(Duration::from_millis(200)),
            )
            .await;
            waited += 1;
            a = b.raw(&call).await?;
        }
        if !a.status.is_success() {
            return Err(format!(
                "answered {} ({}); want 2xx, or 409 with Retry-After while the first is in progress",
                a.status,
                String::from_utf8_lossy(&a.body)
            ).into());
        }
        answers.push(a.body);
    }
    let ids: Vec<wire::CreateNodesResponse> = answers
        .iter()
        .map(|b| serde_json::from_slice(b).map_err(|e| format!("not a CreateNodesResponse: {e}")))
        .collect::<Result<_, _>>()?;
    if ids[0] != ids[1] {
        return Err(format!(
            "the two answers differ: {:?} and {:?}",
            ids[0].nodes, ids[1].nodes
        )
        .into());
    }
    b.wait_for(pool, "size 3 with 3 live nodes", |o| {
        o.is_some_and(|p| p.size == 3 && live(p).len() == 3)
    })
    .await?;
    Ok("two requests under one key at once: one node, the same answer".into())
}

async fn problem_on_bad_request(b: &Battery<'_>) -> Finding {
    let k = key("bad-request");
    let call = Call::mutate(
        "CreatePool".into(),
        Method::POST,
        vec!["v1", "pools"],
        Some(&serde_json::json!({"pool": 42})),
        &k,
    );
    let a = b.raw(&call).await?;
    problem_with(
        &a,
        &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY],
        ProblemType::Invalid,
    )
}

async fn not_found(b: &Battery<'_>) -> Finding {
    let missing = b.pool("missing");
    match b.http.set_size(&missing, 1, &key("not-found")).await {
        Err(e) if e.kind == ErrorKind::NotFound => {}
        Err(e) => return Err(format!("set size of a missing pool: {e} (want not-found)").into()),
        Ok(()) => return Err("set size of a missing pool succeeded".into()),
    }
    let k = key("not-found-raw");
    let call = Call::mutate(
        "SetSize".into(),
        Method::PUT,
        vec!["v1", "pools", &missing, "size"],
        Some(&wire::SetSizeRequest { size: 1 }),
        &k,
    );
    let a = b.raw(&call).await?;
    problem_with(&a, &[StatusCode::NOT_FOUND], ProblemType::NotFound)
}

async fn unauthorized(b: &Battery<'_>) -> Finding {
    let call = Call::get("Capabilities".into(), vec!["v1", "capabilities"]);
    let a = b
        .http
        .transport()
        .exchange(&call, false)
        .await
        .map_err(|e| e.to_string())?;
    if a.status == StatusCode::UNAUTHORIZED {
        Ok("a request without the token is refused with 401".into())
    } else {
        Err(format!(
            "a request without the token answered {} (want 401)",
            a.status
        )
        .into())
    }
}

fn problem_with(a: &Answer, statuses: &[StatusCode], want: ProblemType) -> Finding {
    if !statuses.contains(&a.status) {
        return Err(format!(
            "answered {} (want {})",
            a.status,
            statuses
                .iter()
                .map(|s| s.as_u16().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        )
        .into());
    }
    let Some(p) = a.problem() else {
        return Err(format!(
            "answered {} with content type {:?}, not application/problem+json",
            a.status,
            a.content_type.as_deref().unwrap_or("none")
        )
        .into());
    };
    match p.kind.as_deref().and_then(ProblemType::parse) {
        Some(t) if t == want => Ok(format!(
            "{} application/problem+json, type {}",
            a.status.as_u16(),
            p.kind.unwrap_or_default()
        )),
        _ => Err(format!("problem type {:?} (want {})", p.kind, want.uri()).into()),
    }
}

async fn delete(b: &Battery<'_>, pool: &str) -> Finding {
    b.http
        .delete_pool(pool, &key("delete"))
        .await
        .map_err(|e| e.to_string())?;
    b.wait_for(pool, "the pool gone", |o| o.is_none()).await?;
    Ok(format!("{pool} gone"))
}
