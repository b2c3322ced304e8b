//! Launch template versions poolwright makes for pools that set
//! `template.image` (or `template.instanceType`): made from the version the
//! pool's file names, with the image and type overridden, found again by
//! their description (a restart or a resync makes none), and cleaned up
//! once no group uses them, the last few per pool kept for a roll back.

use aws_sdk_ec2::types as ec2;

use super::mapping::{DERIVED_PREFIX, Derived};
use super::sdk::{Clients, error};
use crate::model::{LaunchTemplate, NodeTemplate};
use crate::provider::{ErrorKind, ProviderError, Result};

/// Versions poolwright made kept per pool besides the one in use.
const KEEP: usize = 3;
/// Versions per DescribeLaunchTemplateVersions page (the API's maximum).
const PAGE: i32 = 200;

/// Whether the template needs a version of its own.
pub fn needs_version(t: &NodeTemplate) -> bool {
    t.image.is_some() || t.instance_type.is_some()
}

/// Every version of the launch template: (number, description).
async fn versions(
    clients: &Clients,
    call: &str,
    lt: &LaunchTemplate,
) -> Result<Vec<(i64, String)>> {
    let mut pages = clients
        .ec2
        .describe_launch_template_versions()
        .set_launch_template_id(lt.id.clone())
        .set_launch_template_name(lt.name.clone())
        .max_results(PAGE)
        .into_paginator()
        .send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| error(call, e))?;
        for v in page.launch_template_versions() {
            if let Some(n) = v.version_number() {
                out.push((n, v.version_description().unwrap_or_default().to_string()));
            }
        }
    }
    Ok(out)
}

/// What one version says of itself, when poolwright made it.
pub async fn describe_one(
    clients: &Clients,
    lt: &LaunchTemplate,
    version: &str,
) -> Result<Option<Derived>> {
    let call = format!("DescribeLaunchTemplateVersions({}, {version})", name(lt));
    let answer = clients
        .ec2
        .describe_launch_template_versions()
        .set_launch_template_id(lt.id.clone())
        .set_launch_template_name(lt.name.clone())
        .versions(version)
        .send()
        .await
        .map_err(|e| error(&call, e))?;
    Ok(answer
        .launch_template_versions()
        .first()
        .and_then(|v| v.version_description())
        .and_then(Derived::parse))
}

fn name(lt: &LaunchTemplate) -> &str {
    lt.name.as_deref().or(lt.id.as_deref()).unwrap_or("?")
}

/// The launch template version that stands for `pool`'s `template`: the one
/// made for it before, or a new one from the version the file names.
pub async fn version_for(
    clients: &Clients,
    pool: &str,
    t: &NodeTemplate,
) -> Result<LaunchTemplate> {
    let lt = t.launch_template.clone().unwrap_or_default();
    let derived = Derived::of(pool, t);
    let call = format!("CreateLaunchTemplateVersion({}, {pool})", name(&lt));
    let description = derived
        .describe()
        .map_err(|m| ProviderError::new(&call, ErrorKind::Rejected, m))?;
    let at = |n: i64| LaunchTemplate {
        version: Some(n.to_string()),
        ..lt.clone()
    };
    if let Some((n, _)) = versions(clients, &call, &lt)
        .await?
        .into_iter()
        .find(|(_, d)| *d == description)
    {
        return Ok(at(n));
    }
    let data = ec2::RequestLaunchTemplateData::builder()
        .set_image_id(t.image.clone())
        .set_instance_type(t.instance_type.as_deref().map(ec2::InstanceType::from))
        .build();
    let made = clients
        .ec2
        .create_launch_template_version()
        .set_launch_template_id(lt.id.clone())
        .set_launch_template_name(lt.name.clone())
        .source_version(super::mapping::version_of(&lt))
        .version_description(&description)
        .launch_template_data(data)
        .send()
        .await
        .map_err(|e| error(&call, e))?;
    let n = made
        .launch_template_version()
        .and_then(|v| v.version_number())
        .ok_or_else(|| {
            ProviderError::new(
                &call,
                ErrorKind::Unavailable,
                "the answer names no version number",
            )
        })?;
    Ok(at(n))
}

/// Delete the versions poolwright made for `pool` that the group does not
/// use (`in_use`), keeping the [`KEEP`] newest. Returns how many went.
pub async fn clean(
    clients: &Clients,
    pool: &str,
    lt: &LaunchTemplate,
    in_use: &str,
) -> Result<usize> {
    let call = format!("DeleteLaunchTemplateVersions({}, {pool})", name(lt));
    let prefix = format!("{DERIVED_PREFIX}{pool} ");
    let mut ours: Vec<i64> = versions(clients, &call, lt)
        .await?
        .into_iter()
        .filter(|(n, d)| d.starts_with(&prefix) && n.to_string() != in_use)
        .map(|(n, _)| n)
        .collect();
    ours.sort_unstable_by(|a, b| b.cmp(a));
    let gone: Vec<String> = ours.iter().skip(KEEP).map(i64::to_string).collect();
    if gone.is_empty() {
        return Ok(0);
    }
    clients
        .ec2
        .delete_launch_template_versions()
        .set_launch_template_id(lt.id.clone())
        .set_launch_template_name(lt.name.clone())
        .set_versions(Some(gone.clone()))
        .send()
        .await
        .map_err(|e| error(&call, e))?;
    Ok(gone.len())
}
