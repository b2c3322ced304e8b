"""The EC2 part, and the only one: pools as plain EC2 instances (no Auto
Scaling group), found by tag. Replace this file to port the plug-in.

Tags on every instance launched:
  poolwright.io/pool=<pool>          which pool (the describe filter)
  poolwright.io/template=<hash>      the template hash it launched with
  poolwright.io/managed-by=poolwright
  poolwright.io/op=<key>             the request that launched it (resume)
plus the pool's in-place `tags`.

Image channels: the account's own AMIs tagged poolwright.io/channel=<channel>
(GET /v1/channels/{channel}/images), released at their CreationDate.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from typing import Any, Iterator

import boto3
import botocore.config
import botocore.exceptions

from . import protocol as p
from .backend import (
    HEALTHY, PENDING, TERMINATED, TERMINATING, UNHEALTHY, Backend, Image, Instance,
)

TAG_POOL = "poolwright.io/pool"
TAG_TEMPLATE = "poolwright.io/template"
TAG_MANAGED_BY = "poolwright.io/managed-by"
TAG_OP = "poolwright.io/op"
TAG_CHANNEL = "poolwright.io/channel"  # on AMIs: the image channel they are published on
MANAGED_BY = "poolwright"
RESERVED_TAG_PREFIXES = ("aws:", "poolwright.io/")
MAX_TAGS = 50  # EC2's limit per resource
OWN_TAGS = 4

STATES = {
    "pending": PENDING,
    "running": HEALTHY,  # "healthy" means running; see the README
    "stopping": UNHEALTHY,
    "stopped": UNHEALTHY,
    "shutting-down": TERMINATING,
    "terminated": TERMINATED,
}
LIVE_EC2_STATES = ["pending", "running", "stopping", "stopped"]

# template.plugin keys and their types.
PLUGIN_KEYS: dict[str, type] = {
    "subnetId": str,
    "securityGroupIds": list,
    "keyName": str,
    "iamInstanceProfile": str,
    "userData": str,
    "availabilityZone": str,
    "metadataHttpTokens": str,
}

THROTTLED = {
    "Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestThrottled",
    "TooManyRequestsException", "EC2ThrottledException", "PriorRequestNotComplete",
}
# Hard limits: poolwright falls back to terminate-before-create. (A transient
# InsufficientInstanceCapacity is 503: never give up capacity for a blip.)
QUOTA = {"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"}
# The request itself is wrong (bad AMI, subnet...): retrying cannot help.
INVALID_PREFIXES = (
    "InvalidAMIID", "InvalidSubnet", "InvalidGroup", "InvalidKeyPair", "InvalidParameter",
    "InvalidInstanceType", "InvalidUserData", "InvalidBlockDeviceMapping", "InvalidTag",
    "InvalidPlacementGroup", "MissingParameter", "Unsupported", "TagLimitExceeded",
)
INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,32}$")


def _tags(raw: list[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw or []}


def _creation_date(v: Any) -> datetime | None:
    """An AMI's CreationDate (a string, "2026-12-07T20:00:00.000Z") as an
    aware UTC datetime, or None if EC2 gave none or an unreadable one."""
    if not isinstance(v, str):
        return None
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        return None
    # EC2 always says Z; a time without an offset is read as UTC, not local.
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _chunks(items: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


class AwsError:
    """Turns a botocore failure into the protocol's problem."""

    @staticmethod
    def problem(call: str, e: Exception) -> p.Problem:
        if isinstance(e, botocore.exceptions.ClientError):
            err = e.response.get("Error", {})
            code, msg = err.get("Code", "?"), err.get("Message", "")
            detail = f"EC2 {call}: {code}: {msg}"
            if code in THROTTLED:
                return p.throttled(detail)
            if code in QUOTA:
                return p.quota_exceeded(detail)
            if code.startswith(INVALID_PREFIXES):
                return p.invalid(detail, 422)
            return p.unavailable(detail)
        # Connection errors, timeouts, missing credentials or region.
        return p.unavailable(f"EC2 {call}: {type(e).__name__}: {e}")


class Ec2Backend(Backend):
    name = "ec2-instances"
    version = "1.0.0"
    template_fields = ("image", "instanceType", "plugin")

    def __init__(self, region: str, endpoint_url: str | None):
        config = botocore.config.Config(
            region_name=region,
            # A few quick retries in botocore; beyond that the 429/503 goes back
            # to poolwright, which retries with its own backoff.
            retries={"mode": "standard", "max_attempts": 3},
            connect_timeout=5,
            read_timeout=20,
            user_agent_extra=f"poolwright-ec2-instances/{self.version}",
        )
        # boto3 clients are thread-safe (sessions are not): one client, made here.
        self.client = boto3.session.Session().client("ec2", endpoint_url=endpoint_url, config=config)

    def _call(self, call: str, fn, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            print(f"ec2-instances: EC2 {call} failed: {e}", file=sys.stderr, flush=True)
            raise AwsError.problem(call, e) from None

    # --- checks ---------------------------------------------------------------

    def check_template(self, template: dict[str, Any]) -> None:
        for field in ("image", "instanceType"):
            if not isinstance(template.get(field), str) or not template[field]:
                raise p.invalid(f"template.{field} is required (the AMI id and the instance type)", 422)
        plugin = template.get("plugin") or {}
        unknown = sorted(set(plugin) - set(PLUGIN_KEYS))
        if unknown:
            raise p.invalid(
                f"template.plugin: unknown key(s) {', '.join(unknown)}; known: {', '.join(PLUGIN_KEYS)}",
                422,
            )
        for k, v in plugin.items():
            if not isinstance(v, PLUGIN_KEYS[k]):
                raise p.invalid(f"template.plugin.{k}: expected a {PLUGIN_KEYS[k].__name__}", 422)
        if not all(isinstance(g, str) for g in plugin.get("securityGroupIds", [])):
            raise p.invalid("template.plugin.securityGroupIds: expected an array of strings", 422)
        if plugin.get("metadataHttpTokens", "required") not in ("required", "optional"):
            raise p.invalid("template.plugin.metadataHttpTokens: expected required or optional", 422)

    def verify_template(self, template: dict[str, Any]) -> None:
        res = self._call("DescribeImages", self.client.describe_images, ImageIds=[template["image"]])
        if not res.get("Images"):
            raise p.invalid(f"template.image: AMI {template['image']} does not exist or is not visible", 422)

    def check_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            if k.startswith(RESERVED_TAG_PREFIXES):
                raise p.invalid(f"tags: {k!r} is reserved (aws: and poolwright.io/ prefixes)", 422)
            if not 1 <= len(k) <= 128 or len(v) > 256:
                raise p.invalid(f"tags: {k!r}: keys are 1 to 128 characters, values at most 256", 422)
        if len(tags) > MAX_TAGS - OWN_TAGS:
            raise p.invalid(f"tags: at most {MAX_TAGS - OWN_TAGS} (EC2 allows {MAX_TAGS} per instance)", 422)

    # --- reads ----------------------------------------------------------------

    def _instance(self, raw: dict[str, Any]) -> Instance:
        tags = _tags(raw.get("Tags"))
        return Instance(
            id=raw["InstanceId"],
            pool=tags.get(TAG_POOL, ""),
            state=STATES.get(raw["State"]["Name"], UNHEALTHY),
            launched_at=raw["LaunchTime"],
            zone=raw.get("Placement", {}).get("AvailabilityZone"),
            template_hash=tags.get(TAG_TEMPLATE),
            op=tags.get(TAG_OP),
            template={"image": raw.get("ImageId"), "instanceType": raw.get("InstanceType")},
            labels={k: v for k, v in tags.items()
                    if k not in (TAG_POOL, TAG_TEMPLATE, TAG_OP) and not k.startswith("aws:")},
        )

    def _describe(self, call: str, **kwargs: Any) -> list[Instance]:
        out = []
        pages = self.client.get_paginator("describe_instances").paginate(**kwargs)
        try:
            for page in pages:
                for res in page["Reservations"]:
                    out.extend(self._instance(i) for i in res["Instances"])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            print(f"ec2-instances: EC2 {call} failed: {e}", file=sys.stderr, flush=True)
            raise AwsError.problem(call, e) from None
        return out

    def list(self, pools: list[str]) -> dict[str, list[Instance]]:
        out: dict[str, list[Instance]] = {name: [] for name in pools}
        if not pools:
            return out
        # ONE paginated DescribeInstances for the whole batch (a filter takes
        # up to 200 values; describeBatchSize is 100). Terminated instances are
        # included on purpose: a resumed request counts what it launched.
        found = self._describe(
            "DescribeInstances",
            Filters=[{"Name": f"tag:{TAG_POOL}", "Values": pools}],
            PaginationConfig={"PageSize": 1000},
        )
        for inst in found:
            if inst.pool in out:
                out[inst.pool].append(inst)
        return out

    def live_ids(self) -> set[str]:
        found = self._describe(
            "DescribeInstances",
            Filters=[
                {"Name": f"tag:{TAG_MANAGED_BY}", "Values": [MANAGED_BY]},
                {"Name": "instance-state-name", "Values": LIVE_EC2_STATES},
            ],
            PaginationConfig={"PageSize": 1000},
        )
        return {i.id for i in found}

    def get(self, instance_id: str) -> Instance | None:
        if not INSTANCE_ID.match(instance_id):
            return None
        try:
            res = self.client.describe_instances(InstanceIds=[instance_id])
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code", "").startswith("InvalidInstanceID"):
                return None
            raise AwsError.problem("DescribeInstances", e) from None
        except botocore.exceptions.BotoCoreError as e:
            raise AwsError.problem("DescribeInstances", e) from None
        for r in res["Reservations"]:
            for i in r["Instances"]:
                return self._instance(i)
        return None

    def provider_id(self, instance: Instance) -> str | None:
        return f"aws:///{instance.zone}/{instance.id}" if instance.zone else None

    def channel_images(self, channel: str) -> list[Image]:
        # Owners=self: a channel is what this account publishes. Only
        # `available` AMIs: one still being made (pending) or failed cannot be
        # launched, and poolwright must not roll pools to it. Paginated by
        # hand (MaxResults/NextToken) so every page goes through _call.
        args: dict[str, Any] = {
            "Owners": ["self"],
            "Filters": [
                {"Name": f"tag:{TAG_CHANNEL}", "Values": [channel]},
                {"Name": "state", "Values": ["available"]},
            ],
            "MaxResults": 1000,
        }
        out: list[Image] = []
        while True:
            res = self._call("DescribeImages", self.client.describe_images, **args)
            for raw in res.get("Images", []):
                released = _creation_date(raw.get("CreationDate"))
                if released is None:
                    # Without a release time poolwright cannot age or order it:
                    # leave it out, and say so where an operator looks.
                    print(
                        f"ec2-instances: channel {channel}: AMI {raw.get('ImageId')} has no readable "
                        f"CreationDate ({raw.get('CreationDate')!r}); left out",
                        file=sys.stderr, flush=True,
                    )
                    continue
                out.append(Image(id=raw["ImageId"], released=released))
            token = res.get("NextToken")
            if not token:
                return out
            args["NextToken"] = token

    # --- writes ---------------------------------------------------------------

    def launch(self, pool, template, template_hash, count, tags, op, token) -> list[Instance]:
        plugin = template.get("plugin") or {}
        own = {TAG_POOL: pool, TAG_TEMPLATE: template_hash, TAG_MANAGED_BY: MANAGED_BY, TAG_OP: op}
        all_tags = [{"Key": k, "Value": v} for k, v in {**tags, **own}.items()]
        args: dict[str, Any] = {
            "ImageId": template["image"],
            "InstanceType": template["instanceType"],
            "MinCount": count,  # all or nothing: no partial launch to account for
            "MaxCount": count,
            # EC2's own idempotency: the same token and arguments return the
            # first launch instead of a second one, even when DescribeInstances
            # does not show the first one yet (eventual consistency).
            "ClientToken": token,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": all_tags},
                {"ResourceType": "volume", "Tags": all_tags},
            ],
            # IMDSv2 by default: no SSRF-reachable credentials on the node.
            "MetadataOptions": {
                "HttpTokens": plugin.get("metadataHttpTokens", "required"),
                "HttpEndpoint": "enabled",
            },
        }
        if "subnetId" in plugin:
            args["SubnetId"] = plugin["subnetId"]
        if "securityGroupIds" in plugin:
            args["SecurityGroupIds"] = plugin["securityGroupIds"]
        if "keyName" in plugin:
            args["KeyName"] = plugin["keyName"]
        if "iamInstanceProfile" in plugin:
            prof = plugin["iamInstanceProfile"]
            args["IamInstanceProfile"] = {"Arn": prof} if prof.startswith("arn:") else {"Name": prof}
        if "userData" in plugin:
            args["UserData"] = plugin["userData"]  # boto3 base64-encodes it
        if "availabilityZone" in plugin:
            args["Placement"] = {"AvailabilityZone": plugin["availabilityZone"]}
        res = self._call("RunInstances", self.client.run_instances, **args)
        return [self._instance(i) for i in res["Instances"]]

    def terminate(self, ids: list[str]) -> None:
        # TerminateInstances is idempotent: terminating a terminated instance
        # answers its state again.
        for chunk in _chunks(ids, 500):
            self._call("TerminateInstances", self.client.terminate_instances, InstanceIds=chunk)

    def tag(self, ids: list[str], tags: dict[str, str]) -> None:
        if not tags:
            return
        for chunk in _chunks(ids, 500):
            self._call(
                "CreateTags", self.client.create_tags, Resources=chunk,
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            )

    def untag(self, ids: list[str], keys: list[str]) -> None:
        if not keys:
            return
        for chunk in _chunks(ids, 500):
            self._call(
                "DeleteTags", self.client.delete_tags, Resources=chunk,
                Tags=[{"Key": k} for k in keys],
            )

    def adopt(self, pool: str, instances: list[Instance], hashes: dict[str, str]) -> None:
        ids = [i.id for i in instances]
        self.tag(ids, {TAG_MANAGED_BY: MANAGED_BY})
        for inst in instances:
            if inst.template_hash is None and inst.id in hashes:
                self.tag([inst.id], {TAG_TEMPLATE: hashes[inst.id]})
