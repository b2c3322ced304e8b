"""The seam between the protocol and a platform. To write a plug-in for
another platform, implement `Backend` (see ec2.py) and keep the rest.

A backend only has to offer stateless primitives that are safe to repeat:
list a pool's machines in one call, launch N machines stamped with a pool,
a template hash and an operation id, terminate by id, tag; and, to serve
image channels (optional), list a channel's images. Everything about keys,
plans, sizes and locking lives in pools.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Node states of the protocol, plus "terminated" (gone: never reported).
PENDING, HEALTHY, UNHEALTHY, TERMINATING, TERMINATED = (
    "pending", "healthy", "unhealthy", "terminating", "terminated",
)
LIVE = (PENDING, HEALTHY, UNHEALTHY)


@dataclass
class Instance:
    id: str
    pool: str
    state: str
    launched_at: datetime
    zone: str | None
    # The template hash it was launched with (None: not launched by poolwright).
    template_hash: str | None
    # The idempotency key (as an op id) of the request that launched it.
    op: str | None
    # What it runs, as a template: used only to adopt a pool poolwright did not create.
    template: dict[str, Any] = field(default_factory=dict)
    # Its tags other than the plug-in's own: reported as the node's labels
    # (for rollout.order: {label: KEY} and a poolwright.io/do-not-disrupt hold).
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in LIVE


@dataclass
class Image:
    """One image a channel offers: what pools' `template.image` would carry,
    and when the platform says it was made (poolwright's minReleaseAge
    counts from it)."""

    id: str
    released: datetime


class Backend(ABC):
    name: str
    version: str
    # The NodeTemplate fields this backend acts on (capabilities.templateFields).
    template_fields: tuple[str, ...]

    @abstractmethod
    def check_template(self, template: dict[str, Any]) -> None:
        """Raise a 422 Problem if machines cannot be launched from it."""

    @abstractmethod
    def verify_template(self, template: dict[str, Any]) -> None:
        """Ask the platform whether the template's image exists (a 422 Problem
        if not), before a pool is created or moved to it: a broken template
        is refused before any node is terminated for it."""

    @abstractmethod
    def check_tags(self, tags: dict[str, str]) -> None:
        """Raise a 422 Problem if the in-place tags cannot be applied."""

    @abstractmethod
    def list(self, pools: list[str]) -> dict[str, list[Instance]]:
        """Every machine of these pools, terminated ones included when the
        platform still shows them: ONE listing for all pools."""

    @abstractmethod
    def live_ids(self) -> set[str]:
        """Ids of every live machine this plug-in manages, across pools (quota)."""

    @abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """One machine by id, or None if the platform does not know it."""

    @abstractmethod
    def launch(
        self,
        pool: str,
        template: dict[str, Any],
        template_hash: str,
        count: int,
        tags: dict[str, str],
        op: str,
        token: str,
    ) -> list[Instance]:
        """Launch exactly `count` machines (all or none), stamped with pool,
        template hash and `op`. `token` is a platform idempotency token: the
        same token with the same arguments must not launch again."""

    @abstractmethod
    def terminate(self, ids: list[str]) -> None:
        """Terminate these machines; already terminating or gone is fine."""

    @abstractmethod
    def tag(self, ids: list[str], tags: dict[str, str]) -> None: ...

    @abstractmethod
    def untag(self, ids: list[str], keys: list[str]) -> None: ...

    @abstractmethod
    def adopt(self, pool: str, instances: list[Instance], hashes: dict[str, str]) -> None:
        """Mark machines of a pool poolwright did not create as managed;
        `hashes` gives a template hash for those without one."""

    @abstractmethod
    def provider_id(self, instance: Instance) -> str | None:
        """Kubernetes spec.providerID of the machine."""

    def channel_images(self, channel: str) -> list[Image]:
        """Every image published on `channel` (GET /v1/channels/{channel}/images),
        in any order; [] when the platform has none for it, which the server
        answers 404 `not-found`. Not abstract: a platform without image
        channels keeps this default and every channel is unknown, exactly
        what the contract asks of a plug-in that is no image source."""
        return []
