//! `type: aws`: pools are EC2 Auto Scaling groups, driven through
//! aws-sdk-autoscaling (and aws-sdk-ec2 only for what the Auto Scaling API does
//! not say: an instance's launch time and template tag, and tagging running
//! instances). The provider offers primitives; the shared executor rolls.
//!
//! Safety choices:
//! - Every group poolwright creates or adopts is tagged `poolwright.io/managed-by`
//!   and has scale-in protection on its instances, so the group never picks a
//!   victim itself; poolwright terminates the instance it chose.
//! - Capacity changes send absolute numbers, and a call whose answer was lost
//!   (5xx after the change, a timeout) is checked against the group before it is
//!   reported as failed, so a retry never doubles a surge.

pub mod images;
pub mod mapping;
pub mod sdk;
pub mod versions;

use crate::sync::Locked;
use crate::sync::RwLocked;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2;
use jiff::Timestamp;
use tokio::sync::OnceCell;

use self::mapping::{
    GroupView, InstanceDetail, InstanceView, MANAGED_BY, TAG_MANAGED_BY, TAG_POOL, TAG_TEMPLATE,
};
pub use self::sdk::CallCounter;
use self::sdk::{Clients, error};
use super::{Capabilities, ErrorKind, OpKey, Provider, ProviderError, Result};
use crate::clock::Clock;
use crate::model::{Bounds, InPlace, LaunchTemplate, NodeTemplate, ObservedPool, PoolSpec};
use crate::spec::types::AwsProvider;

/// Group names per DescribeAutoScalingGroups call (the API's default limit).
const NAMES_PER_DESCRIBE: usize = 50;
/// Records per page (the API's maximum).
const RECORDS_PER_PAGE: i32 = 100;
/// Values per EC2 filter (the API's limit); more groups list by tag instead.
const VALUES_PER_FILTER: usize = 200;
/// Instances per DescribeInstances page (the API's maximum).
const INSTANCES_PER_PAGE: i32 = 1000;
/// Instance ids per SetInstanceProtection call (the API's limit).
const IDS_PER_PROTECTION: usize = 50;
const DEFAULT_POLL: Duration = Duration::from_secs(5);

pub struct Aws {
    name: String,
    settings: AwsProvider,
    /// Built on first use: loading the credential chain is asynchronous.
    clients: OnceCell<Clients>,
    preset: Option<SdkConfig>,
    counter: CallCounter,
    clock: Arc<dyn Clock>,
    /// The pools of the files this provider serves, by pool name.
    pools: RwLock<BTreeMap<String, PoolSpec>>,
    first_healthy: Mutex<HashMap<String, Timestamp>>,
    /// What each numbered launch template version says of itself (a
    /// version never changes, so it is asked once).
    derived: Mutex<HashMap<(String, String), Option<mapping::Derived>>>,
}

impl Aws {
    /// A provider on the standard credential chain and the document's settings.
    pub fn new(name: &str, settings: &AwsProvider, clock: Arc<dyn Clock>) -> Aws {
        Aws {
            name: name.to_string(),
            settings: settings.clone(),
            clients: OnceCell::new(),
            preset: None,
            counter: CallCounter::default(),
            clock,
            pools: RwLock::new(BTreeMap::new()),
            first_healthy: Mutex::new(HashMap::new()),
            derived: Mutex::new(HashMap::new()),
        }
    }

    /// A provider on an SDK config built by the caller (tests, embedding).
    pub fn with_sdk_config(
        name: &str,
        settings: &AwsProvider,
        config: SdkConfig,
        clock: Arc<dyn Clock>,
    ) -> Aws {
        Aws {
            preset: Some(config),
            ..Aws::new(name, settings, clock)
        }
    }

    /// Every HTTP request this provider made, by operation.
    pub fn calls(&self) -> &CallCounter {
        &self.counter
    }

    async fn clients(&self) -> &Clients {
        self.clients
            .get_or_init(|| async {
                let config = match &self.preset {
                    Some(c) => c.clone(),
                    None => sdk::load(&self.settings).await,
                };
                Clients::new(&config, &self.counter)
            })
            .await
    }

    fn spec(&self, pool: &str) -> Option<PoolSpec> {
        self.pools.read_locked().get(pool).cloned()
    }

    /// The group of each pool: the bound pool's group name; for a pool no longer
    /// in the files, the group tagged with its name (one DescribeTags call for
    /// all of them), else the pool's own name.
    async fn groups_of(&self, pools: &[String]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(pools.len());
        let mut unbound = Vec::new();
        {
            let bound = self.pools.read_locked();
            for pool in pools {
                match bound.get(pool) {
                    Some(spec) => out.push((pool.clone(), group_name(spec))),
                    None => unbound.push(pool.clone()),
                }
            }
        }
        for chunk in unbound.chunks(VALUES_PER_FILTER) {
            let mut tagged: HashMap<String, String> = HashMap::new();
            let mut pages = self
                .clients()
                .await
                .asg
                .describe_tags()
                .filters(filter_asg("key", [TAG_POOL.to_string()]))
                .filters(filter_asg("value", chunk.iter().cloned()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| error("DescribeTags(poolwright.io/pool)", e))?;
                for t in page.tags() {
                    if let (Some(group), Some(pool)) = (t.resource_id(), t.value()) {
                        tagged.insert(pool.to_string(), group.to_string());
                    }
                }
            }
            for pool in chunk {
                let group = tagged.remove(pool).unwrap_or_else(|| pool.clone());
                out.push((pool.clone(), group));
            }
        }
        Ok(out)
    }

    async fn group_of(&self, pool: &str) -> Result<String> {
        Ok(self
            .groups_of(&[pool.to_string()])
            .await?
            .pop()
            .map(|(_, g)| g)
            .unwrap_or_else(|| pool.to_string()))
    }

    /// Describe groups, 50 names per call, 100 records per page.
    async fn describe_groups(&self, groups: &[String]) -> Result<Vec<GroupView>> {
        let mut out = Vec::new();
        for chunk in groups.chunks(NAMES_PER_DESCRIBE) {
            let mut pages = self
                .clients()
                .await
                .asg
                .describe_auto_scaling_groups()
                .set_auto_scaling_group_names(Some(chunk.to_vec()))
                .max_records(RECORDS_PER_PAGE)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    error(
                        &format!("DescribeAutoScalingGroups({} groups)", chunk.len()),
                        e,
                    )
                })?;
                out.extend(page.auto_scaling_groups().iter().map(group_view));
            }
        }
        Ok(out)
    }

    async fn describe_group(&self, call: &str, group: &str) -> Result<GroupView> {
        self.describe_groups(&[group.to_string()])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| {
                ProviderError::new(
                    call,
                    ErrorKind::NotFound,
                    format!("Auto Scaling group {group:?} does not exist"),
                )
            })
    }

    /// Launch time and template tag of the groups' instances. A few groups are
    /// asked for by name; many are listed through the template tag, so the
    /// number of calls follows the number of instances, not of groups.
    async fn instance_details(
        &self,
        groups: &[GroupView],
    ) -> Result<HashMap<String, InstanceDetail>> {
        let mut out = HashMap::new();
        let with_instances: Vec<String> = groups
            .iter()
            .filter(|g| !g.instances.is_empty())
            .map(|g| g.name.clone())
            .collect();
        if with_instances.is_empty() {
            return Ok(out);
        }
        let by = if with_instances.len() <= VALUES_PER_FILTER {
            filter_ec2("tag:aws:autoscaling:groupName", with_instances)
        } else {
            filter_ec2("tag-key", [TAG_TEMPLATE.to_string()])
        };
        let states = ["pending", "running", "shutting-down", "stopping", "stopped"];
        let filter = vec![
            by,
            filter_ec2("instance-state-name", states.iter().map(|s| s.to_string())),
        ];
        let mut pages = self
            .clients()
            .await
            .ec2
            .describe_instances()
            .set_filters(Some(filter))
            .max_results(INSTANCES_PER_PAGE)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| error("DescribeInstances(Auto Scaling instances)", e))?;
            for r in page.reservations() {
                for i in r.instances() {
                    let Some(id) = i.instance_id() else { continue };
                    let launched_at = i
                        .launch_time()
                        .and_then(|t| Timestamp::from_second(t.secs()).ok());
                    let template_tag = i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some(TAG_TEMPLATE))
                        .and_then(|t| t.value())
                        .map(str::to_string);
                    let running = i
                        .state()
                        .and_then(|s| s.name())
                        .is_none_or(|n| *n == ec2::InstanceStateName::Running);
                    out.insert(
                        id.to_string(),
                        InstanceDetail {
                            launched_at,
                            template_tag,
                            running,
                        },
                    );
                }
            }
        }
        Ok(out)
    }

    /// Fill in which groups use a version poolwright made (one call per
    /// version never seen before), for the pools that set an image or an
    /// instance type (others never use one).
    async fn learn_versions(
        &self,
        pairs: &[(String, String)],
        views: &mut [GroupView],
    ) -> Result<()> {
        let wanted: std::collections::HashSet<&str> = pairs
            .iter()
            .filter(|(pool, _)| {
                self.spec(pool)
                    .is_some_and(|s| versions::needs_version(&s.template))
            })
            .map(|(_, group)| group.as_str())
            .collect();
        for view in views
            .iter_mut()
            .filter(|v| wanted.contains(v.name.as_str()))
        {
            let Some(lt) = &view.launch_template else {
                continue;
            };
            let Some(version) = lt.version.clone().filter(|v| v.parse::<i64>().is_ok()) else {
                continue;
            };
            let key = (
                lt.id.clone().or(lt.name.clone()).unwrap_or_default(),
                version.clone(),
            );
            let known = self.derived.locked().get(&key).cloned();
            let derived = match known {
                Some(d) => d,
                None => {
                    let d = versions::describe_one(self.clients().await, lt, &version).await?;
                    self.derived.locked().insert(key, d.clone());
                    d
                }
            };
            view.derived = derived;
        }
        Ok(())
    }

    /// The template as the group is to launch it: with a version of its
    /// own when the pool sets an image or an instance type.
    async fn launchable(&self, pool: &str, t: &NodeTemplate) -> Result<NodeTemplate> {
        if !versions::needs_version(t) {
            return Ok(t.clone());
        }
        let lt = versions::version_for(self.clients().await, pool, t).await?;
        Ok(NodeTemplate {
            launch_template: Some(lt),
            ..t.clone()
        })
    }

    fn observe(
        &self,
        pool: &str,
        group: &GroupView,
        details: &HashMap<String, InstanceDetail>,
    ) -> ObservedPool {
        let spec = self.spec(pool);
        let mut first = self.first_healthy.locked();
        mapping::observed_pool(
            pool,
            group,
            details,
            spec.as_ref(),
            &mut first,
            self.clock.now(),
        )
    }

    /// One UpdateAutoScalingGroup for bounds, and the desired capacity if given.
    async fn resize(
        &self,
        call: &str,
        group: &str,
        bounds: Bounds,
        desired: Option<u32>,
    ) -> Result<()> {
        self.clients()
            .await
            .asg
            .update_auto_scaling_group()
            .auto_scaling_group_name(group)
            .min_size(bounds.min as i32)
            .max_size(bounds.max as i32)
            .set_desired_capacity(desired.map(|d| d as i32))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| error(call, e))
    }

    /// Set the desired capacity, widening the group's bounds only as far as
    /// needed and bringing them back home when they no longer need to be wide.
    async fn set_capacity(&self, call: &str, pool: &str, group: &GroupView, to: u32) -> Result<()> {
        let home = mapping::home_bounds(self.spec(pool).as_ref(), group);
        let bounds = mapping::bounds_for(home, to);
        let result = if bounds.min != group.min || bounds.max != group.max {
            self.resize(call, &group.name, bounds, Some(to)).await
        } else {
            self.clients()
                .await
                .asg
                .set_desired_capacity()
                .auto_scaling_group_name(&group.name)
                .desired_capacity(to as i32)
                .honor_cooldown(false)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| error(call, e))
        };
        match result {
            Err(e) if e.kind != ErrorKind::Rejected && e.kind != ErrorKind::Quota => {
                // The answer was lost, not the change: look before failing.
                match self.describe_group(call, &group.name).await {
                    Ok(now) if now.desired == to => Ok(()),
                    _ => Err(e),
                }
            }
            other => other,
        }
    }

    async fn protect(&self, call: &str, group: &str, ids: &[String]) -> Result<()> {
        for chunk in ids.chunks(IDS_PER_PROTECTION) {
            self.clients()
                .await
                .asg
                .set_instance_protection()
                .auto_scaling_group_name(group)
                .set_instance_ids(Some(chunk.to_vec()))
                .protected_from_scale_in(true)
                .send()
                .await
                .map_err(|e| error(call, e))?;
        }
        Ok(())
    }

    async fn put_tags(
        &self,
        call: &str,
        group: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        if tags.is_empty() {
            return Ok(());
        }
        let tags = tags.iter().map(|(k, v)| asg_tag(group, k, v)).collect();
        self.clients()
            .await
            .asg
            .create_or_update_tags()
            .set_tags(Some(tags))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| error(call, e))
    }

    async fn terminate(
        &self,
        call: &str,
        group: &GroupView,
        node: &str,
        decrement: bool,
    ) -> Result<()> {
        let result = self
            .clients()
            .await
            .asg
            .terminate_instance_in_auto_scaling_group()
            .instance_id(node)
            .should_decrement_desired_capacity(decrement)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| error(call, e));
        let Err(e) = result else { return Ok(()) };
        // A retried request after a lost answer finds the instance already on its
        // way out: that is the change we asked for.
        let now = self.describe_group(call, &group.name).await?;
        let gone = now.live().all(|i| i.id != node);
        if gone && (!decrement || now.desired < group.desired) {
            Ok(())
        } else {
            Err(e)
        }
    }
}

fn group_name(spec: &PoolSpec) -> String {
    spec.placement
        .group_name
        .clone()
        .unwrap_or_else(|| spec.name.clone())
}

fn filter_asg(name: &str, values: impl IntoIterator<Item = String>) -> asg::Filter {
    asg::Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().collect()))
        .build()
}

fn filter_ec2(name: &str, values: impl IntoIterator<Item = String>) -> ec2::Filter {
    ec2::Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().collect()))
        .build()
}

/// A group tag, propagated to instances at launch.
fn asg_tag(group: &str, key: &str, value: &str) -> asg::Tag {
    asg::Tag::builder()
        .resource_id(group)
        .resource_type("auto-scaling-group")
        .key(key)
        .value(value)
        .propagate_at_launch(true)
        .build()
}

fn lt_of(id: Option<&str>, name: Option<&str>, version: Option<&str>) -> LaunchTemplate {
    LaunchTemplate {
        name: name.map(str::to_string),
        id: id.map(str::to_string),
        version: version.map(str::to_string),
    }
}

fn lt_spec(lt: &LaunchTemplate) -> asg::LaunchTemplateSpecification {
    asg::LaunchTemplateSpecification::builder()
        .set_launch_template_id(lt.id.clone())
        .set_launch_template_name(lt.name.clone())
        .version(mapping::version_of(lt))
        .build()
}

/// The group's launch configuration for a template: a plain launch template,
/// or a mixed-instances policy when instance types are listed.
fn launch_settings(
    t: &NodeTemplate,
) -> (
    Option<asg::LaunchTemplateSpecification>,
    Option<asg::MixedInstancesPolicy>,
) {
    let Some(lt) = &t.launch_template else {
        return (None, None);
    };
    if t.instance_types.is_empty() {
        return (Some(lt_spec(lt)), None);
    }
    let overrides = t
        .instance_types
        .iter()
        .map(|ty| {
            asg::LaunchTemplateOverrides::builder()
                .instance_type(ty)
                .build()
        })
        .collect();
    let policy = asg::MixedInstancesPolicy::builder()
        .launch_template(
            asg::LaunchTemplate::builder()
                .launch_template_specification(lt_spec(lt))
                .set_overrides(Some(overrides))
                .build(),
        )
        .build();
    (None, Some(policy))
}

fn group_view(g: &asg::AutoScalingGroup) -> GroupView {
    let (launch_template, instance_types) = match (g.launch_template(), g.mixed_instances_policy())
    {
        (Some(lt), _) => (
            Some(lt_of(
                lt.launch_template_id(),
                lt.launch_template_name(),
                lt.version(),
            )),
            Vec::new(),
        ),
        (None, Some(m)) => {
            let lt = m.launch_template();
            let spec = lt.and_then(|l| l.launch_template_specification());
            (
                spec.map(|s| {
                    lt_of(
                        s.launch_template_id(),
                        s.launch_template_name(),
                        s.version(),
                    )
                }),
                lt.map(|l| {
                    l.overrides()
                        .iter()
                        .filter_map(|o| o.instance_type().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            )
        }
        (None, None) => (None, Vec::new()),
    };
    GroupView {
        name: g.auto_scaling_group_name().unwrap_or_default().to_string(),
        min: g.min_size().unwrap_or(0).max(0) as u32,
        max: g.max_size().unwrap_or(0).max(0) as u32,
        desired: g.desired_capacity().unwrap_or(0).max(0) as u32,
        launch_template,
        instance_types,
        tags: g
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
            .collect(),
        instances: g
            .instances()
            .iter()
            .map(|i| InstanceView {
                id: i.instance_id().unwrap_or_default().to_string(),
                lifecycle: i
                    .lifecycle_state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                health: i.health_status().unwrap_or_default().to_string(),
                launch_template: i.launch_template().map(|lt| {
                    lt_of(
                        lt.launch_template_id(),
                        lt.launch_template_name(),
                        lt.version(),
                    )
                }),
                protected: i.protected_from_scale_in().unwrap_or(false),
                zone: i.availability_zone().map(str::to_string),
            })
            .collect(),
        derived: None,
    }
}

#[async_trait]
impl Provider for Aws {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reimage: false,
            // The provider batches by 50 names itself; give it everything.
            describe_batch: 10_000,
            poll_interval: self
                .settings
                .poll_interval
                .map(|d| d.as_std())
                .unwrap_or(DEFAULT_POLL),
            // Capacity calls are absolute and checked against the group instead.
            idempotency_keys: false,
            acts_on: None,
        }
    }

    fn bind_pools(&self, pools: &[PoolSpec]) {
        let mut bound = self.pools.write_locked();
        *bound = pools.iter().map(|p| (p.name.clone(), p.clone())).collect();
    }

    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>> {
        let pairs = self.groups_of(names).await?;
        let groups: Vec<String> = pairs.iter().map(|(_, g)| g.clone()).collect();
        let mut views = self.describe_groups(&groups).await?;
        self.learn_versions(&pairs, &mut views).await?;
        let details = self.instance_details(&views).await?;
        let by_name: HashMap<&str, &GroupView> =
            views.iter().map(|g| (g.name.as_str(), g)).collect();
        Ok(pairs
            .iter()
            .filter_map(|(pool, group)| {
                let view = by_name.get(group.as_str())?;
                Some(self.observe(pool, view, &details))
            })
            .collect())
    }

    async fn create_pool(&self, spec: &PoolSpec, _key: &OpKey) -> Result<()> {
        let group = group_name(spec);
        let call = format!("CreateAutoScalingGroup({group}, size {})", spec.size);
        let placement = &spec.placement;
        if placement.subnets.is_empty() && placement.availability_zones.is_empty() {
            return Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                format!(
                    "pool {} has no Auto Scaling group yet, and poolwright can create one only where \
                     it is told to: set aws.subnets or aws.availabilityZones (or create the group and \
                     set spec.adopt: true)",
                    spec.name
                ),
            ));
        }
        let mut tags = mapping::in_place_tags(&spec.in_place)
            .map_err(|m| ProviderError::new(&call, ErrorKind::Rejected, m.0))?;
        tags.insert(TAG_MANAGED_BY.into(), MANAGED_BY.into());
        tags.insert(TAG_POOL.into(), spec.name.clone());
        tags.insert(TAG_TEMPLATE.into(), mapping::hash_tag(spec.template.hash()));
        let tags = tags.iter().map(|(k, v)| asg_tag(&group, k, v)).collect();
        let home = spec.autoscaling.unwrap_or(Bounds {
            min: 0,
            max: spec.size,
        });
        let bounds = mapping::bounds_for(home, spec.size);
        let launch = self.launchable(&spec.name, &spec.template).await?;
        let (lt, mixed) = launch_settings(&launch);
        let mut req = self
            .clients()
            .await
            .asg
            .create_auto_scaling_group()
            .auto_scaling_group_name(&group)
            .min_size(bounds.min as i32)
            .max_size(bounds.max as i32)
            .desired_capacity(spec.size as i32)
            .set_launch_template(lt)
            .set_mixed_instances_policy(mixed)
            .new_instances_protected_from_scale_in(true)
            .set_tags(Some(tags));
        if placement.subnets.is_empty() {
            req = req.set_availability_zones(Some(placement.availability_zones.clone()));
        } else {
            req = req.vpc_zone_identifier(placement.subnets.join(","));
        }
        let Err(e) = req.send().await.map_err(|e| error(&call, e)) else {
            return Ok(());
        };
        // A create whose answer was lost is retried into AlreadyExists: the group
        // is ours if it carries this pool's tags.
        match self.describe_group(&call, &group).await {
            Ok(g) if g.managed() && g.tags.get(TAG_POOL) == Some(&spec.name) => Ok(()),
            _ => Err(e),
        }
    }

    async fn delete_pool(&self, pool: &str, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!("DeleteAutoScalingGroup({group})");
        let view = self.describe_group(&call, &group).await?;
        // Belt and braces: the planner deletes only inventory pools, and the
        // group must say it is poolwright's too.
        if !view.managed() {
            return Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                format!(
                    "group {group:?} is not tagged {TAG_MANAGED_BY}={MANAGED_BY}; refusing to delete it"
                ),
            ));
        }
        self.clients()
            .await
            .asg
            .delete_auto_scaling_group()
            .auto_scaling_group_name(&group)
            .force_delete(true)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| error(&call, e))
    }

    async fn adopt_pool(&self, pool: &str, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!("AdoptAutoScalingGroup({group})");
        let view = self.describe_group(&call, &group).await?;
        let tags = BTreeMap::from([
            (TAG_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (TAG_POOL.to_string(), pool.to_string()),
        ]);
        self.put_tags(&call, &group, &tags).await?;
        self.clients()
            .await
            .asg
            .update_auto_scaling_group()
            .auto_scaling_group_name(&group)
            .new_instances_protected_from_scale_in(true)
            .send()
            .await
            .map_err(|e| error(&call, e))?;
        let unprotected: Vec<String> = view
            .live()
            .filter(|i| !i.protected)
            .map(|i| i.id.clone())
            .collect();
        self.protect(&call, &group, &unprotected).await
    }

    async fn set_size(&self, pool: &str, size: u32, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!("SetDesiredCapacity({group}, {size})");
        let view = self.describe_group(&call, &group).await?;
        // Absolute. poolwright lowers a size only through the executor, which
        // terminates the nodes it chose (every instance is protected from
        // scale-in, so the group never picks one).
        self.set_capacity(&call, pool, &view, size).await
    }

    async fn set_template(&self, pool: &str, template: &NodeTemplate, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!(
            "UpdateAutoScalingGroup({group}, template {})",
            template.hash()
        );
        let launch = self.launchable(pool, template).await?;
        let (lt, mixed) = launch_settings(&launch);
        if lt.is_none() && mixed.is_none() {
            return Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                "the template has no launch template (template.aws.launchTemplate)",
            ));
        }
        // Launch template first, tag second: a node launched in between carries
        // the old tag and is replaced again (wasteful), never the reverse (a node
        // on the old template passing as updated).
        self.clients()
            .await
            .asg
            .update_auto_scaling_group()
            .auto_scaling_group_name(&group)
            .set_launch_template(lt)
            .set_mixed_instances_policy(mixed)
            .send()
            .await
            .map_err(|e| error(&call, e))?;
        let tag = BTreeMap::from([(TAG_TEMPLATE.to_string(), mapping::hash_tag(template.hash()))]);
        self.put_tags(&call, &group, &tag).await?;
        // The versions made for this pool that no group uses now go, the
        // newest few kept (a roll back finds its version again, or makes it).
        if versions::needs_version(template)
            && let Some(lt) = &launch.launch_template
        {
            let in_use = lt.version.clone().unwrap_or_default();
            if let Err(e) = versions::clean(self.clients().await, pool, lt, &in_use).await {
                tracing::warn!(pool, "cleaning up launch template versions: {e}");
            }
        }
        Ok(())
    }

    async fn channel_images(
        &self,
        channel: &str,
        source: &crate::spec::types::ChannelSource,
    ) -> Result<Vec<crate::model::image::Release>> {
        match source {
            crate::spec::types::ChannelSource::Aws(a) => {
                images::images(self.clients().await, channel, a).await
            }
            _ => Err(ProviderError::new(
                format!("ChannelImages({channel})"),
                ErrorKind::Unsupported,
                "an aws provider answers only a source of type aws",
            )),
        }
    }

    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        _size: u32,
        _key: &OpKey,
    ) -> Result<Vec<String>> {
        let group = self.group_of(pool).await?;
        let before = self
            .describe_group(&format!("CreateNodes({group}, {count})"), &group)
            .await?;
        let to = before.desired + count;
        let call = format!("SetDesiredCapacity({group}, {} -> {to})", before.desired);
        // Instances being kept must not be scale-in victims (the group protects
        // new ones itself; an adopted group may still have unprotected ones).
        let unprotected: Vec<String> = before
            .live()
            .filter(|i| !i.protected)
            .map(|i| i.id.clone())
            .collect();
        self.protect(&call, &group, &unprotected).await?;
        self.set_capacity(&call, pool, &before, to).await?;
        let after = self.describe_group(&call, &group).await?;
        Ok(after
            .instances
            .iter()
            .filter(|i| before.instances.iter().all(|b| b.id != i.id))
            .map(|i| i.id.clone())
            .collect())
    }

    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        _key: &OpKey,
    ) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!(
            "TerminateInstanceInAutoScalingGroup({group}, {node}{})",
            if decrement { ", decrement" } else { "" }
        );
        let view = self.describe_group(&call, &group).await?;
        if !view.instances.iter().any(|i| i.id == node) {
            return Err(ProviderError::new(
                call,
                ErrorKind::NotFound,
                format!("instance {node} is not in group {group}"),
            ));
        }
        let home = mapping::home_bounds(self.spec(pool).as_ref(), &view);
        if decrement && view.desired > 0 && view.min > view.desired - 1 {
            // Taking a node out before its replacement exists: make room below min.
            let room = Bounds {
                min: mapping::bounds_for(home, view.desired - 1).min,
                max: view.max,
            };
            self.resize(&call, &group, room, None).await?;
        }
        self.terminate(&call, &view, node, decrement).await?;
        // A surge raised the bounds; bring them home once it has ended.
        let after = self.describe_group(&call, &group).await?;
        let bounds = mapping::bounds_for(home, after.desired);
        if (bounds.min, bounds.max) != (after.min, after.max) {
            self.resize(&call, &group, bounds, None).await?;
        }
        Ok(())
    }

    async fn update_in_place(&self, pool: &str, attrs: &InPlace, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!("CreateOrUpdateTags({group})");
        let want = mapping::in_place_tags(attrs)
            .map_err(|m| ProviderError::new(&call, ErrorKind::Rejected, m.0))?;
        let view = self.describe_group(&call, &group).await?;
        let have = mapping::in_place_tags(&mapping::in_place_of(&view.tags)).unwrap_or_default();
        let changed: BTreeMap<String, String> = want
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let removed: Vec<String> = have
            .keys()
            .filter(|k| !want.contains_key(*k))
            .cloned()
            .collect();
        self.put_tags(&call, &group, &changed).await?;
        if !removed.is_empty() {
            let tags = removed.iter().map(|k| asg_tag(&group, k, "")).collect();
            self.clients()
                .await
                .asg
                .delete_tags()
                .set_tags(Some(tags))
                .send()
                .await
                .map_err(|e| error(&format!("DeleteTags({group})"), e))?;
        }
        // Running instances get the same tags (new ones get them at launch).
        let ids: Vec<String> = view.live().map(|i| i.id.clone()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let ec2 = &self.clients().await.ec2;
        for chunk in ids.chunks(INSTANCES_PER_PAGE as usize) {
            if !changed.is_empty() {
                ec2.create_tags()
                    .set_resources(Some(chunk.to_vec()))
                    .set_tags(Some(
                        changed
                            .iter()
                            .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
                            .collect(),
                    ))
                    .send()
                    .await
                    .map_err(|e| error(&format!("CreateTags(instances of {group})"), e))?;
            }
            if !removed.is_empty() {
                ec2.delete_tags()
                    .set_resources(Some(chunk.to_vec()))
                    .set_tags(Some(
                        removed
                            .iter()
                            .map(|k| ec2::Tag::builder().key(k).build())
                            .collect(),
                    ))
                    .send()
                    .await
                    .map_err(|e| error(&format!("DeleteTags(instances of {group})"), e))?;
            }
        }
        Ok(())
    }

    async fn set_bounds(&self, pool: &str, bounds: Option<Bounds>, _key: &OpKey) -> Result<()> {
        let group = self.group_of(pool).await?;
        let call = format!("UpdateAutoScalingGroup({group}, bounds)");
        let view = self.describe_group(&call, &group).await?;
        let b = bounds.unwrap_or(Bounds {
            min: 0,
            max: view.max.max(view.desired),
        });
        self.resize(&call, &group, b, Some(b.clamp(view.desired)))
            .await
    }
}
