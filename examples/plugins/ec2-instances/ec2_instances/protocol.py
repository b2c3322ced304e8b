"""The poolwright plug-in protocol v1, platform-neutral: problem details and
the checks of every request body (schemas/provider-plugin.openapi.yaml).

Nothing here knows about EC2; a plug-in for another platform copies this file
unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any

PROTOCOL = "poolwright.io/plugin/v1"
MAX_POOL_SIZE = 100_000
# Pool names are RFC 1123 labels (they are URL path segments and tag values).
POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Channel names too: an ImageChannel's name, sent as a URL path segment (and,
# in ec2.py, matched against a tag value).
CHANNEL_NAME = POOL_NAME
# The most images one channel answer may hold (ChannelImages in the contract).
MAX_CHANNEL_IMAGES = 10_000
TEMPLATE_HASH = re.compile(r"^[0-9a-f]{16}$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Every field of a NodeTemplate; the ones a plug-in does not act on are refused.
TEMPLATE_FIELDS = (
    "image",
    "instanceType",
    "kubernetesVersion",
    "launchTemplate",
    "instanceTypes",
    "plugin",
)

_TITLES = {
    "quota-exceeded": "Quota exceeded",
    "not-found": "Not found",
    "conflict": "Conflict",
    "throttled": "Throttled",
    "invalid": "Invalid request",
    "unavailable": "Unavailable",
    "unsupported": "Not implemented",
}


class Problem(Exception):
    """An RFC 9457 answer. Raised anywhere; the server renders it.

    `kind` is one of the contract's types (`unsupported` for 501); None
    means `about:blank`.
    """

    def __init__(
        self,
        status: int,
        kind: str | None,
        detail: str,
        retry_after: int | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.retry_after = retry_after
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        if self.kind is None:
            kind, title = "about:blank", "Not implemented"
        else:
            kind, title = f"urn:poolwright:problem:{self.kind}", _TITLES[self.kind]
        return {"type": kind, "title": title, "status": self.status, "detail": self.detail}


def invalid(detail: str, status: int = 400) -> Problem:
    return Problem(status, "invalid", detail)


def not_found(detail: str) -> Problem:
    return Problem(404, "not-found", detail)


def conflict(detail: str, retry_after: int | None = None) -> Problem:
    return Problem(409, "conflict", detail, retry_after)


def quota_exceeded(detail: str) -> Problem:
    return Problem(403, "quota-exceeded", detail)


def throttled(detail: str, retry_after: int = 2) -> Problem:
    return Problem(429, "throttled", detail, retry_after)


def unavailable(detail: str, retry_after: int = 2) -> Problem:
    return Problem(503, "unavailable", detail, retry_after)


# --- JSON helpers ----------------------------------------------------------


def canonical(value: Any) -> str:
    """One spelling per JSON value: the idempotency fingerprint hashes this,
    so whitespace or key order never makes a retry look like another request."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact(value: Any) -> str:
    """Storage form that keeps key order (templates are returned as sent)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def template_hash_of(template: dict[str, Any]) -> str:
    """poolwright's own template hash (SHA-256 of its canonical JSON, first 8
    bytes): fields in declaration order, absent/empty ones skipped, `plugin`
    keys sorted. Only needed for pools poolwright did not create (adopt);
    otherwise poolwright sends the hash and the plug-in just stores it."""
    out: dict[str, Any] = {}
    for field in TEMPLATE_FIELDS:
        v = template.get(field)
        if v is None or v == [] or v == {}:
            continue
        if field == "launchTemplate":
            v = {k: v[k] for k in ("name", "id", "version") if v.get(k) is not None}
        if field == "plugin":
            v = json.loads(canonical(v))
        out[field] = v
    digest = hashlib.sha256(compact(out).encode()).digest()
    return digest[:8].hex()


# --- request checks --------------------------------------------------------
# Strict about what poolwright sends (a wrong type is a 400, not a guess),
# lenient about fields it may add later (ignored, as serde does).


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise invalid(f"the body is not JSON: {e}") from None


def as_object(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise invalid(f"{where}: expected an object")
    return v


def as_str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise invalid(f"{where}: expected a string")
    return v


def as_uint(v: Any, where: str, lo: int = 0, hi: int = MAX_POOL_SIZE) -> int:
    # bool is an int in Python; JSON true is not a number.
    if not isinstance(v, int) or isinstance(v, bool):
        raise invalid(f"{where}: expected an integer")
    if not lo <= v <= hi:
        raise invalid(f"{where}: {v} is not within {lo} to {hi}", 422)
    return v


def as_str_map(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    m = as_object(v, where)
    for k, x in m.items():
        as_str(x, f"{where}.{k}")
    return m


def check_pool_name(name: Any, where: str = "pool") -> str:
    name = as_str(name, where)
    if not POOL_NAME.match(name):
        raise invalid(f"{where}: {name!r} is not a pool name (an RFC 1123 label)")
    return name


def check_channel_name(name: Any, where: str = "channel") -> str:
    name = as_str(name, where)
    if not CHANNEL_NAME.match(name):
        raise invalid(f"{where}: {name!r} is not a channel name (an RFC 1123 label)")
    return name


def check_template_hash(v: Any, where: str = "templateHash") -> str:
    v = as_str(v, where)
    if not TEMPLATE_HASH.match(v):
        raise invalid(f"{where}: {v!r} is not 16 lower-case hex digits")
    return v


def check_bounds(v: Any, where: str) -> dict[str, int] | None:
    if v is None:
        return None
    b = as_object(v, where)
    if "min" not in b or "max" not in b:
        raise invalid(f"{where}: min and max are required")
    lo, hi = as_uint(b["min"], f"{where}.min"), as_uint(b["max"], f"{where}.max")
    if lo > hi:
        raise invalid(f"{where}: min {lo} is above max {hi}", 422)
    return {"min": lo, "max": hi}


def check_template(v: Any, acted_on: tuple[str, ...], where: str = "template") -> dict[str, Any]:
    """A NodeTemplate. A field the plug-in does not act on is refused (poolwright
    refuses it first; this is the plug-in's own guard)."""
    t = as_object(v, where)
    for field in ("image", "instanceType", "kubernetesVersion"):
        if t.get(field) is not None:
            as_str(t[field], f"{where}.{field}")
    if t.get("instanceTypes") is not None:
        types = t["instanceTypes"]
        if not isinstance(types, list) or not all(isinstance(x, str) for x in types):
            raise invalid(f"{where}.instanceTypes: expected an array of strings")
    if t.get("launchTemplate") is not None:
        lt = as_object(t["launchTemplate"], f"{where}.launchTemplate")
        for k, x in lt.items():
            if x is not None:
                as_str(x, f"{where}.launchTemplate.{k}")
    if t.get("plugin") is not None:
        as_object(t["plugin"], f"{where}.plugin")
    set_fields = [f for f in TEMPLATE_FIELDS if t.get(f) not in (None, [], {})]
    ignored = [f for f in set_fields if f not in acted_on]
    if ignored:
        raise invalid(
            f"{where}: this plug-in does not act on {', '.join(ignored)} "
            f"(it acts on {', '.join(acted_on)})",
            422,
        )
    return t


def check_in_place(v: Any, where: str = "inPlace") -> dict[str, Any]:
    """InPlace: labels, annotations and tags are string maps; taints
    {key, value?, effect}. Stored and returned as given."""
    if v is None:
        return {}
    a = as_object(v, where)
    for field in ("labels", "annotations", "tags"):
        as_str_map(a.get(field), f"{where}.{field}")
    taints = a.get("taints")
    if taints is not None:
        if not isinstance(taints, list):
            raise invalid(f"{where}.taints: expected an array")
        for i, t in enumerate(taints):
            w = f"{where}.taints[{i}]"
            as_object(t, w)
            as_str(t.get("key"), f"{w}.key")
            if t.get("value") is not None:
                as_str(t["value"], f"{w}.value")
            if t.get("effect") not in TAINT_EFFECTS:
                raise invalid(f"{w}.effect: expected one of {', '.join(TAINT_EFFECTS)}")
            extra = set(t) - {"key", "value", "effect"}
            if extra:
                raise invalid(f"{w}: unknown field(s) {', '.join(sorted(extra))}")
    return a


SAFE_OP_ID = re.compile(r"^[A-Za-z0-9_.:=+@-]{1,128}$")


def op_id(key: str) -> str:
    """The id a request stamps on what it launches (a tag value): the
    Idempotency-Key itself when it is tame (poolwright's are `pw-` and 32 hex
    digits), else a digest of it (keys may hold any printable character)."""
    return key if SAFE_OP_ID.match(key) else "sha256-" + hashlib.sha256(key.encode()).hexdigest()[:48]


def tags_of(in_place: dict[str, Any]) -> dict[str, str]:
    return dict(in_place.get("tags") or {})
