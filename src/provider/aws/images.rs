//! An `ImageChannel` with `source: {aws: ...}`: the AMI an SSM parameter
//! names (EKS publishes its recommended images so), or the AMIs of some
//! owners whose name matches a pattern, each with its creation date.

use aws_sdk_ec2::types as ec2;

use super::sdk::{Clients, error};
use crate::model::image::{MAX_RELEASES, Release};
use crate::provider::{ErrorKind, ProviderError, Result};
use crate::spec::types::AwsImageSource;

/// Whether `v` has the form of an AMI id (`ami-` and 8 or 17 hex digits).
fn is_ami_id(v: &str) -> bool {
    v.strip_prefix("ami-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17) && h.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn release(call: &str, i: &ec2::Image) -> Result<Release> {
    let id = i.image_id().unwrap_or_default();
    let created = i.creation_date().unwrap_or_default();
    let released = created.parse().map_err(|e| {
        ProviderError::new(
            call,
            ErrorKind::Rejected,
            format!("image {id} has CreationDate {created:?}, not a time: {e}"),
        )
    })?;
    Ok(Release {
        image: id.to_string(),
        released,
    })
}

pub async fn images(
    clients: &Clients,
    channel: &str,
    source: &AwsImageSource,
) -> Result<Vec<Release>> {
    if let Some(param) = &source.ssm_parameter {
        let call = format!("GetParameter({})", param.value);
        let answer = clients
            .ssm
            .get_parameter()
            .name(&param.value)
            .send()
            .await
            .map_err(|e| error(&call, e))?;
        let value = answer
            .parameter()
            .and_then(|p| p.value())
            .unwrap_or_default()
            .trim()
            .to_string();
        if !is_ami_id(&value) {
            let shown: String = value.chars().take(60).collect();
            return Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                format!(
                    "SSM parameter {} holds {shown:?}, which is not an AMI id",
                    param.value
                ),
            ));
        }
        let call = format!("DescribeImages({value})");
        let found = clients
            .ec2
            .describe_images()
            .image_ids(&value)
            .send()
            .await
            .map_err(|e| error(&call, e))?;
        let Some(image) = found.images().first() else {
            return Err(ProviderError::new(
                call,
                ErrorKind::NotFound,
                format!(
                    "SSM parameter {} names {value}, which does not exist",
                    param.value
                ),
            ));
        };
        return Ok(vec![release(&call, image)?]);
    }
    let Some(filter) = &source.images else {
        return Err(ProviderError::new(
            format!("ChannelImages({channel})"),
            ErrorKind::Rejected,
            "source.aws names neither ssmParameter nor images",
        ));
    };
    let call = format!("DescribeImages({})", filter.name);
    let mut pages = clients
        .ec2
        .describe_images()
        .set_owners(Some(filter.owners.clone()))
        .filters(
            ec2::Filter::builder()
                .name("name")
                .values(&filter.name)
                .build(),
        )
        .max_results(1000)
        .into_paginator()
        .send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| error(&call, e))?;
        for i in page.images() {
            out.push(release(&call, i)?);
            if out.len() > MAX_RELEASES {
                return Err(ProviderError::new(
                    call,
                    ErrorKind::Rejected,
                    format!("more than {MAX_RELEASES} images match; narrow the name pattern"),
                ));
            }
        }
    }
    Ok(out)
}
