//! The AWS SDK side: building clients from a `Provider` document (standard
//! credential chain, optional profile, endpoint and role), counting the HTTP
//! requests they make, and turning SDK errors into [`ProviderError`]s.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use crate::provider::{ErrorKind, ProviderError};
use crate::spec::types::AwsProvider;

/// Attempts per call when the document does not say (the SDK's adaptive mode
/// spaces them out and slows down when throttled).
const DEFAULT_ATTEMPTS: u32 = 5;
/// One operation, retries included, when the document does not say.
const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(60);

/// HTTP requests made, by `Service.Operation`: every attempt counts, retries
/// included, since that is what a rate limit or a bill sees.
#[derive(Clone, Debug, Default)]
pub struct CallCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl CallCounter {
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.locked().clone()
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    pub fn reset(&self) {
        self.counts.locked().clear();
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "poolwright-call-counter"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let key = cfg
            .load::<Metadata>()
            .map(|m| format!("{}.{}", m.service(), m.name()))
            .unwrap_or_else(|| "unknown".into());
        *self.counts.locked().entry(key).or_default() += 1;
        Ok(())
    }
}

/// The two service clients a provider uses.
#[derive(Clone, Debug)]
pub struct Clients {
    pub asg: aws_sdk_autoscaling::Client,
    pub ec2: aws_sdk_ec2::Client,
    /// Only for image channels with `ssmParameter`.
    pub ssm: aws_sdk_ssm::Client,
}

impl Clients {
    /// Clients on a loaded SDK config, counting requests into `counter`.
    pub fn new(config: &SdkConfig, counter: &CallCounter) -> Clients {
        let asg = aws_sdk_autoscaling::config::Builder::from(config)
            .interceptor(counter.clone())
            .build();
        let ec2 = aws_sdk_ec2::config::Builder::from(config)
            .interceptor(counter.clone())
            .build();
        let ssm = aws_sdk_ssm::config::Builder::from(config)
            .interceptor(counter.clone())
            .build();
        Clients {
            asg: aws_sdk_autoscaling::Client::from_conf(asg),
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            ssm: aws_sdk_ssm::Client::from_conf(ssm),
        }
    }
}

/// Retry and timeout settings of a provider document.
fn retry_config(settings: &AwsProvider) -> RetryConfig {
    RetryConfig::adaptive()
        .with_max_attempts(settings.max_attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1))
        .with_initial_backoff(Duration::from_millis(100))
        .with_max_backoff(Duration::from_secs(10))
}

fn timeout_config(settings: &AwsProvider) -> TimeoutConfig {
    let operation = settings
        .operation_timeout
        .map(|d| d.as_std())
        .unwrap_or(DEFAULT_OPERATION_TIMEOUT);
    let attempts = settings.max_attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1);
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_timeout(operation)
        // One slow attempt must leave time for the retries after it.
        .operation_attempt_timeout((operation / attempts).max(Duration::from_secs(2)))
        .build()
}

/// Load the SDK config: region, profile and credentials from the standard chain
/// (environment, shared files, SSO cache, instance or container role), the
/// document's overrides on top, then the role to assume if any.
pub async fn load(settings: &AwsProvider) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(retry_config(settings))
        .timeout_config(timeout_config(settings));
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(profile) = &settings.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url.value.clone());
    }
    let base = loader.load().await;
    let Some(role) = &settings.assume_role_arn else {
        return base;
    };
    let assumed = aws_config::sts::AssumeRoleProvider::builder(role.value.clone())
        .session_name("poolwright")
        .configure(&base)
        .build()
        .await;
    base.into_builder()
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(assumed),
        )
        .build()
}

/// Error codes that mean "slow down".
const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "TooManyRequestsException",
    "SlowDown",
    "ResourceContention",
    "ScalingActivityInProgress",
];

/// Error codes that mean a quota or capacity refused the request.
const QUOTA: &[&str] = &[
    "LimitExceeded",
    "InstanceLimitExceeded",
    "InsufficientInstanceCapacity",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
];

/// Turn an SDK error into a [`ProviderError`] naming the call and AWS's answer.
pub fn error<E>(call: &str, err: SdkError<E, HttpResponse>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (kind, message) = match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("Unknown");
            let text = e.message().unwrap_or("");
            let status = Some(service.raw().status().as_u16());
            (classify(code, text, status), format!("{code}: {text}"))
        }
        SdkError::TimeoutError(_) => (
            ErrorKind::Unavailable,
            "timed out (operationTimeout)".to_string(),
        ),
        SdkError::DispatchFailure(_) => (
            ErrorKind::Unavailable,
            format!("could not reach the endpoint: {}", chain(&err)),
        ),
        SdkError::ResponseError(_) => (
            ErrorKind::Unavailable,
            format!("unreadable response: {}", chain(&err)),
        ),
        SdkError::ConstructionFailure(_) => (
            ErrorKind::Rejected,
            format!(
                "request not built (region or credentials missing?): {}",
                chain(&err)
            ),
        ),
        _ => (ErrorKind::Rejected, chain(&err)),
    };
    ProviderError::new(call, kind, message)
}

pub fn classify(code: &str, message: &str, status: Option<u16>) -> ErrorKind {
    if THROTTLING.contains(&code) {
        return ErrorKind::Throttled;
    }
    if QUOTA.contains(&code) {
        return ErrorKind::Quota;
    }
    if matches!(status, Some(500..=599))
        || matches!(
            code,
            "ServiceUnavailable" | "InternalFailure" | "InternalError" | "Unavailable"
        )
    {
        return ErrorKind::Unavailable;
    }
    if code.contains("NotFound") || message.contains("not found") {
        return ErrorKind::NotFound;
    }
    ErrorKind::Rejected
}

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(
            classify("Throttling", "Rate exceeded", Some(400)),
            ErrorKind::Throttled
        );
        assert_eq!(classify("LimitExceeded", "", Some(400)), ErrorKind::Quota);
        assert_eq!(classify("Whatever", "", Some(503)), ErrorKind::Unavailable);
        assert_eq!(
            classify(
                "ValidationError",
                "AutoScalingGroup name not found - x",
                Some(400)
            ),
            ErrorKind::NotFound
        );
        assert_eq!(
            classify("AlreadyExists", "", Some(400)),
            ErrorKind::Rejected
        );
    }
}
