"""Crash-resume tests of the ec2-instances plug-in against moto.

Starts `python3 -m moto.server` and the plug-in as subprocesses on free
ports. The plug-in is made to die like kill -9 at a chosen step with the
test hook EC2_INSTANCES_CRASH_AFTER=launch|terminate|plan (os._exit(137):
no cleanup, no "done" record), restarted on the same SQLite file, and the
same request is replayed with the same Idempotency-Key.

Run from this directory:  python3 -m unittest -v test_plugin
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from datetime import datetime, timezone

import boto3

HERE = os.path.dirname(os.path.abspath(__file__))
REGION = "us-east-1"
# AMIs moto knows in every region (moto/ec2/resources/amis.json).
AMI = "ami-1e749f67"  # ubuntu trusty 14.04
AMI_2 = "ami-785db401"  # ubuntu xenial 16.04
TEMPLATE = {"image": AMI, "instanceType": "t3.micro"}
# poolwright's hash of TEMPLATE (seen in `poolwright plugin check`).
TEMPLATE_HASH = "349790a782573258"
# RFC 3339 in UTC at seconds precision, as the plug-in writes `released`.
RFC3339_UTC = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Plugin:
    """One plug-in process on a state file."""

    def __init__(self, endpoint: str, state: str, *args: str, crash_after: str | None = None):
        env = {**os.environ, **AWS_ENV}
        env.pop("EC2_INSTANCES_CRASH_AFTER", None)
        if crash_after:
            env["EC2_INSTANCES_CRASH_AFTER"] = crash_after
        self.log = open(state + ".log", "a")  # the plug-in's stderr, for a failing test
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ec2_instances", "--listen", "127.0.0.1:0", "--state", state,
             "--endpoint-url", endpoint, *args],
            cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        line = self.proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"the plug-in did not start: {line!r}; see {state}.log")
        self.url = line.split()[-1]

    def call(self, method: str, path: str, body=None, key: str | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Idempotency-Key", key)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    def describe(self, pool: str):
        status, body, _ = self.call("POST", "/v1/describe", {"pools": [pool]})
        assert status == 200, body
        return body["pools"][0] if body["pools"] else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


class CrashResume(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.endpoint = f"http://127.0.0.1:{cls.port}"
        cls.moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(cls.port)],
            env={**os.environ, "MOTO_ENABLE_AMI_VALIDATION": "true"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", cls.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    cls.moto.kill()
                    raise
                time.sleep(0.1)
        cls.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=cls.endpoint,
                               aws_access_key_id="testing", aws_secret_access_key="testing")
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.moto.terminate()
        cls.moto.wait()
        cls.tmp.cleanup()

    def setUp(self):
        self.state = os.path.join(self.tmp.name, self.id().rsplit(".", 1)[-1] + ".sqlite")
        self.plugins: list[Plugin] = []

    def tearDown(self):
        for p in self.plugins:
            p.stop()

    def start(self, *args: str, crash_after: str | None = None) -> Plugin:
        p = Plugin(self.endpoint, self.state, *args, crash_after=crash_after)
        self.plugins.append(p)
        return p

    def crash(self, plugin: Plugin, method: str, path: str, body, key: str) -> None:
        """Send a request that kills the plug-in midway: no answer comes."""
        with self.assertRaises((OSError, http.client.HTTPException)):
            plugin.call(method, path, body, key)
        self.assertEqual(plugin.proc.wait(timeout=10), 137)

    def instances(self, **tags: str) -> dict[str, str]:
        """id -> EC2 state of every instance carrying these tags."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        out = {}
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for r in page["Reservations"]:
                for i in r["Instances"]:
                    out[i["InstanceId"]] = i["State"]["Name"]
        return out

    def by_op(self, key: str) -> dict[str, str]:
        return self.instances(**{"poolwright.io/op": key})

    def by_pool(self, pool: str) -> dict[str, str]:
        return self.instances(**{"poolwright.io/pool": pool})

    def create(self, plugin: Plugin, pool: str, size: int, key: str):
        spec = {"pool": {"name": pool, "size": size, "template": TEMPLATE}, "templateHash": TEMPLATE_HASH}
        return plugin.call("POST", "/v1/pools", spec, key)

    def live(self, view) -> list[str]:
        return [n["id"] for n in view["nodes"] if n["state"] != "terminating"]

    # --- the tests ---------------------------------------------------------------

    def test_create_nodes_after_a_crash_after_launch_launches_nothing_more(self):
        pool = "crash-nodes"
        p = self.start()
        self.assertEqual(self.create(p, pool, 1, "create-1")[0], 201)
        p.stop()

        p = self.start(crash_after="launch")
        req = {"count": 3, "size": 4}
        self.crash(p, "POST", f"/v1/pools/{pool}/nodes", req, "grow-3")
        launched = self.by_op("grow-3")
        self.assertEqual(len(launched), 3, "the crashed attempt launched its 3 instances")

        p = self.start()
        status, body, _ = p.call("POST", f"/v1/pools/{pool}/nodes", req, "grow-3")
        self.assertEqual(status, 200, body)
        self.assertEqual(sorted(body["nodes"]), sorted(launched), "the answer names what was launched")
        self.assertEqual(len(self.by_op("grow-3")), 3, "no instance launched twice for one intent")
        view = p.describe(pool)
        self.assertEqual(view["size"], 4)
        self.assertEqual(len(self.live(view)), 4)
        # A replay after "done" answers the same, without acting.
        status2, body2, _ = p.call("POST", f"/v1/pools/{pool}/nodes", req, "grow-3")
        self.assertEqual((status2, body2), (status, body))
        self.assertEqual(len(self.by_op("grow-3")), 3)

    def test_create_pool_after_a_crash_after_launch_launches_only_the_rest(self):
        pool = "crash-create"
        p = self.start(crash_after="launch")
        spec = {"pool": {"name": pool, "size": 2, "template": TEMPLATE}, "templateHash": TEMPLATE_HASH}
        self.crash(p, "POST", "/v1/pools", spec, "create-c")
        self.assertEqual(len(self.by_op("create-c")), 2)

        p = self.start()
        # Not created yet as far as records go; another key may not take the name.
        self.assertEqual(self.create(p, pool, 2, "other-key")[0], 409)
        self.assertEqual(self.create(p, pool, 2, "create-c")[0], 201)
        self.assertEqual(len(self.by_op("create-c")), 2)
        self.assertEqual(len(self.by_pool(pool)), 2)
        view = p.describe(pool)
        self.assertEqual((view["size"], len(self.live(view))), (2, 2))
        self.assertEqual(view["template"], TEMPLATE, "the template is returned verbatim")

    def test_terminate_with_decrement_after_a_crash_counts_once(self):
        pool = "crash-term"
        p = self.start()
        self.assertEqual(self.create(p, pool, 3, "create-t")[0], 201)
        victim = self.live(p.describe(pool))[0]
        p.stop()

        p = self.start(crash_after="terminate")
        path = f"/v1/pools/{pool}/nodes/{victim}/terminate"
        self.crash(p, "POST", path, {"decrement": True}, "term-1")
        self.assertIn(self.by_pool(pool)[victim], ("shutting-down", "terminated"))

        p = self.start()
        self.assertEqual(p.describe(pool)["size"], 3, "not done: the size has not changed yet")
        for _ in range(2):  # the resume, then a replay of the done answer
            status, body, _ = p.call("POST", path, {"decrement": True}, "term-1")
            self.assertEqual(status, 200, body)
        view = p.describe(pool)
        self.assertEqual(view["size"], 2, "the decrement counted once")
        live = self.live(view)
        self.assertEqual(len(live), 2)
        self.assertNotIn(victim, live)
        states = self.by_pool(pool)
        self.assertEqual(sum(s in ("shutting-down", "terminated") for s in states.values()), 1,
                         "no other node terminated")

    def test_terminate_with_replacement_after_a_crash_replaces_once(self):
        pool = "crash-repl"
        p = self.start()
        self.assertEqual(self.create(p, pool, 2, "create-r")[0], 201)
        victim = self.live(p.describe(pool))[-1]
        p.stop()

        p = self.start(crash_after="launch")
        path = f"/v1/pools/{pool}/nodes/{victim}/terminate"
        self.crash(p, "POST", path, {"decrement": False}, "repl-1")
        self.assertEqual(len(self.by_op("repl-1")), 1)

        p = self.start()
        status, body, _ = p.call("POST", path, {"decrement": False}, "repl-1")
        self.assertEqual(status, 200, body)
        self.assertEqual(len(self.by_op("repl-1")), 1, "one replacement, not two")
        view = p.describe(pool)
        self.assertEqual(view["size"], 2)
        self.assertEqual(len(self.live(view)), 2)
        self.assertNotIn(victim, self.live(view))

    def test_shrink_after_a_crash_terminates_only_the_planned_nodes(self):
        pool = "crash-shrink"
        p = self.start()
        self.assertEqual(self.create(p, pool, 4, "create-s")[0], 201)
        p.stop()

        p = self.start(crash_after="terminate")
        self.crash(p, "PUT", f"/v1/pools/{pool}/size", {"size": 2}, "shrink-2")
        gone = {i for i, s in self.by_pool(pool).items() if s in ("shutting-down", "terminated")}
        self.assertEqual(len(gone), 2)

        p = self.start()
        status, body, _ = p.call("PUT", f"/v1/pools/{pool}/size", {"size": 2}, "shrink-2")
        self.assertEqual(status, 200, body)
        now_gone = {i for i, s in self.by_pool(pool).items() if s in ("shutting-down", "terminated")}
        self.assertEqual(now_gone, gone, "the resume terminated no other node")
        view = p.describe(pool)
        self.assertEqual((view["size"], len(self.live(view))), (2, 2))

    def test_crash_before_acting_leaves_nothing_behind(self):
        pool = "crash-plan"
        p = self.start()
        self.assertEqual(self.create(p, pool, 1, "create-p")[0], 201)
        p.stop()
        # "plan": the plan is saved, nothing launched yet.
        p = self.start(crash_after="plan")
        self.crash(p, "PUT", f"/v1/pools/{pool}/size", {"size": 3}, "grow-p")
        self.assertEqual(len(self.by_op("grow-p")), 0)
        p = self.start()
        self.assertEqual(p.call("PUT", f"/v1/pools/{pool}/size", {"size": 3}, "grow-p")[0], 200)
        self.assertEqual(len(self.by_op("grow-p")), 2)
        view = p.describe(pool)
        self.assertEqual((view["size"], len(self.live(view))), (3, 3))

    def test_quota_refuses_a_launch_and_launches_nothing(self):
        pool = "quota"
        p = self.start("--max-instances", "3")
        # Instances of the other tests count too: the quota is for the whole plug-in.
        already = sum(s in ("pending", "running", "stopping", "stopped")
                      for s in self.instances(**{"poolwright.io/managed-by": "poolwright"}).values())
        p.stop()
        p = self.start("--max-instances", str(already + 3))
        self.assertEqual(self.create(p, pool, 2, "create-q")[0], 201)
        status, body, headers = p.call("POST", f"/v1/pools/{pool}/nodes", {"count": 2, "size": 4}, "surge-q")
        self.assertEqual(status, 403, body)
        self.assertEqual(body["type"], "urn:poolwright:problem:quota-exceeded")
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        self.assertEqual(len(self.by_op("surge-q")), 0, "nothing launched")
        self.assertEqual(p.describe(pool)["size"], 2)
        # Terminate-before-create still works at the limit (the refused-surge fallback).
        victim = self.live(p.describe(pool))[0]
        status, body, _ = p.call("POST", f"/v1/pools/{pool}/nodes/{victim}/terminate", {"decrement": False}, "tbc-q")
        self.assertEqual(status, 200, body)
        # A refused key is not remembered: once there is room, the same
        # request is judged afresh (poolwright may wait and send it again).
        p.stop()
        p = self.start("--max-instances", str(already + 10))
        status, body, _ = p.call("POST", f"/v1/pools/{pool}/nodes", {"count": 2, "size": 4}, "surge-q")
        self.assertEqual(status, 200, body)
        self.assertEqual(len(self.by_op("surge-q")), 2)

    def test_keys_are_required_and_bound_to_one_request(self):
        pool = "keys"
        p = self.start()
        self.assertEqual(self.create(p, pool, 0, "create-k")[0], 201)
        status, body, _ = p.call("PUT", f"/v1/pools/{pool}/size", {"size": 1})
        self.assertEqual((status, body["type"]), (400, "urn:poolwright:problem:invalid"))
        self.assertEqual(p.call("PUT", f"/v1/pools/{pool}/size", {"size": 1}, "size-k")[0], 200)
        status, body, _ = p.call("PUT", f"/v1/pools/{pool}/size", {"size": 2}, "size-k")
        self.assertEqual((status, body["type"]), (422, "urn:poolwright:problem:invalid"))
        self.assertEqual(p.describe(pool)["size"], 1)

    def test_channel_images_are_the_accounts_amis_tagged_with_the_channel(self):
        def ami(name: str, channel: str) -> str:
            image = self.ec2.register_image(Name=name)["ImageId"]
            self.ec2.create_tags(Resources=[image], Tags=[{"Key": "poolwright.io/channel", "Value": channel}])
            return image

        # moto stamps CreationDate with the time of the call (it cannot be
        # set), so the two may share a second: the test checks the form only.
        base = {ami("channel-base-1", "base"), ami("channel-base-2", "base")}
        other = ami("channel-other-1", "other")
        p = self.start()

        # A read: no Idempotency-Key.
        status, body, headers = p.call("GET", "/v1/channels/base/images")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual({i["image"] for i in body["images"]}, base, "both, and nothing of another channel")
        for i in body["images"]:
            self.assertRegex(i["released"], RFC3339_UTC)
            released = datetime.strptime(i["released"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            self.assertLess(abs(time.time() - released.timestamp()), 600, "released is the AMI's creation time")
        status, body, _ = p.call("GET", "/v1/channels/other/images")
        self.assertEqual((status, [i["image"] for i in body["images"]]), (200, [other]))

        status, body, headers = p.call("GET", "/v1/channels/nope/images")
        self.assertEqual((status, body["type"]), (404, "urn:poolwright:problem:not-found"), body)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        for bad in ("Bad_Name", "a" * 64, "-base"):
            status, body, _ = p.call("GET", f"/v1/channels/{bad}/images")
            self.assertEqual((status, body["type"]), (400, "urn:poolwright:problem:invalid"), bad)
        status, body, headers = p.call("POST", "/v1/channels/base/images", {}, "post-ch")
        self.assertEqual((status, headers["Allow"]), (405, "GET"))


if __name__ == "__main__":
    unittest.main()
