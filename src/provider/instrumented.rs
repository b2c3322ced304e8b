//! A provider wrapped so every call is timed, traced (a `provider_call` span
//! with the provider and the call, and a debug record of its outcome) and its
//! outcome counted (the daemon's `/metrics`: provider call errors and
//! latency), without any backend knowing about metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Capabilities, ErrorKind, OpKey, Provider, Result};
use crate::model::{Bounds, InPlace, NodeTemplate, ObservedPool, PoolSpec};

/// Told about every provider call once it returns.
pub trait CallObserver: Send + Sync {
    fn call_finished(
        &self,
        provider: &str,
        call: &'static str,
        elapsed: Duration,
        error: Option<ErrorKind>,
    );
}

pub struct Instrumented {
    inner: Arc<dyn Provider>,
    observer: Arc<dyn CallObserver>,
}

impl Instrumented {
    pub fn wrap(inner: Arc<dyn Provider>, observer: Arc<dyn CallObserver>) -> Arc<dyn Provider> {
        Arc::new(Instrumented { inner, observer })
    }

    async fn timed<T>(
        &self,
        call: &'static str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        use tracing::Instrument;
        let span = tracing::debug_span!("provider_call", provider = self.inner.name(), call);
        let started = Instant::now();
        let result = f.instrument(span.clone()).await;
        let elapsed = started.elapsed();
        let _entered = span.enter();
        match &result {
            Ok(_) => tracing::debug!(
                elapsed_ms = elapsed.as_millis() as u64,
                "provider call done"
            ),
            Err(e) => tracing::debug!(
                elapsed_ms = elapsed.as_millis() as u64,
                kind = ?e.kind,
                error = %e,
                "provider call failed"
            ),
        }
        self.observer.call_finished(
            self.inner.name(),
            call,
            elapsed,
            result.as_ref().err().map(|e| e.kind),
        );
        result
    }
}

#[async_trait]
impl Provider for Instrumented {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>> {
        self.timed("describe_pools", self.inner.describe_pools(names))
            .await
    }
    async fn create_pool(&self, spec: &PoolSpec, key: &OpKey) -> Result<()> {
        self.timed("create_pool", self.inner.create_pool(spec, key))
            .await
    }
    async fn delete_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        self.timed("delete_pool", self.inner.delete_pool(pool, key))
            .await
    }
    async fn set_size(&self, pool: &str, size: u32, key: &OpKey) -> Result<()> {
        self.timed("set_size", self.inner.set_size(pool, size, key))
            .await
    }
    async fn set_template(&self, pool: &str, template: &NodeTemplate, key: &OpKey) -> Result<()> {
        self.timed("set_template", self.inner.set_template(pool, template, key))
            .await
    }
    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        size: u32,
        key: &OpKey,
    ) -> Result<Vec<String>> {
        self.timed(
            "create_nodes",
            self.inner.create_nodes(pool, count, size, key),
        )
        .await
    }
    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        key: &OpKey,
    ) -> Result<()> {
        self.timed(
            "terminate_node",
            self.inner.terminate_node(pool, node, decrement, key),
        )
        .await
    }
    async fn update_in_place(&self, pool: &str, attrs: &InPlace, key: &OpKey) -> Result<()> {
        self.timed(
            "update_in_place",
            self.inner.update_in_place(pool, attrs, key),
        )
        .await
    }
    async fn set_bounds(&self, pool: &str, bounds: Option<Bounds>, key: &OpKey) -> Result<()> {
        self.timed("set_bounds", self.inner.set_bounds(pool, bounds, key))
            .await
    }
    fn bind_pools(&self, pools: &[PoolSpec]) {
        self.inner.bind_pools(pools)
    }

    async fn adopt_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        self.timed("adopt_pool", self.inner.adopt_pool(pool, key))
            .await
    }

    async fn reimage_node(&self, pool: &str, node: &str, key: &OpKey) -> Result<()> {
        self.timed("reimage_node", self.inner.reimage_node(pool, node, key))
            .await
    }

    async fn channel_images(
        &self,
        channel: &str,
        source: &crate::spec::types::ChannelSource,
    ) -> Result<Vec<crate::model::image::Release>> {
        self.timed("channel_images", self.inner.channel_images(channel, source))
            .await
    }
}
