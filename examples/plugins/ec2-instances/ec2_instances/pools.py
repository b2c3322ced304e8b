"""The operations of the protocol over any `Backend`: idempotency keys,
per-pool serialization, quota, and crash-safe resumption. Platform-neutral.

How a mutating request acts exactly once, even across kill -9:

1. `Store.begin` records the key as in-progress, owned by this process
   (a second copy arriving meanwhile gets 409; a done key replays its answer).
2. The operation decides what to do (a *plan*: how many to launch, which ids
   to terminate) and saves the plan BEFORE its first change to the platform.
3. It acts with repeatable steps: terminate is idempotent; a launch first
   counts what this key already launched (instances carry the key as their
   `op` stamp) and launches only the rest, under a platform idempotency token.
4. The record changes (size, template...) and "done" commit in ONE
   transaction. Only then does the answer go out.

After a crash the key is in-progress with a dead owner; the same request
again resumes from the saved plan (step 3 is safe to repeat) and finishes.
A request that failed before its plan was saved acted on nothing: its key is
released, and a retry is judged afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import uuid
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from . import protocol as p
from .backend import HEALTHY, LIVE, PENDING, TERMINATED, TERMINATING, UNHEALTHY, Backend, Instance
from .store import PoolRecord, Store

KEY_TTL = 24 * 3600
# How long a launched instance may stay invisible to the platform's listing
# (EC2 is eventually consistent) before we stop vouching for it.
RECENT_LAUNCH_WINDOW = 300
CRASH_ENV = "EC2_INSTANCES_CRASH_AFTER"
DELAY_ENV = "EC2_INSTANCES_LAUNCH_DELAY"
HIDE_ENV = "EC2_INSTANCES_HIDE_NODES"

Result = tuple[int, Any, Callable | None]  # status, body, record change (in the done transaction)


def crash_point(point: str) -> None:
    """TEST HOOK: EC2_INSTANCES_CRASH_AFTER=launch|terminate|plan makes the
    process die like kill -9 right after that step (before "done")."""
    if os.environ.get(CRASH_ENV) == point:
        print(f"ec2-instances: {CRASH_ENV}={point}: exiting now (test hook)", file=sys.stderr, flush=True)
        os._exit(137)


def launch_delay() -> None:
    """TEST HOOK: EC2_INSTANCES_LAUNCH_DELAY=SECONDS makes every launch that
    long, like a slow platform, so a client that gives up (or dies) in the
    middle of a create can be tested: its retry must find the request in
    progress under its key, not launch again."""
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    if delay > 0:
        time.sleep(delay)


def hidden_nodes() -> int:
    """TEST HOOK: EC2_INSTANCES_HIDE_NODES=N makes describe leave out the N
    oldest live instances of every pool while still reporting the pool's
    size: a plug-in that lies, so a client can be tested for noticing that
    a describe contradicts itself instead of waiting for nodes that never
    show up."""
    try:
        return max(0, int(os.environ.get(HIDE_ENV, "0") or 0))
    except ValueError:
        return 0


def log(msg: str) -> None:
    print(f"ec2-instances: {msg}", file=sys.stderr, flush=True)


class Ctx:
    """One attempt at one keyed request."""

    def __init__(self, store: Store, key: str, plan: dict[str, Any] | None, resumed: bool):
        self.store = store
        self.key = key
        self.op = p.op_id(key)
        self.plan = plan
        self.saved = plan is not None
        self.resumed = resumed

    def commit(self, plan: dict[str, Any]) -> None:
        """Save the plan before the first change to the platform (once)."""
        if not self.saved:
            self.store.save_plan(self.key, plan)
            self.plan, self.saved = plan, True
            crash_point("plan")


def _rank(i: Instance) -> tuple:
    # Shrink order: unhealthy first, then pending, then healthy; newest first.
    order = {UNHEALTHY: 0, PENDING: 1, HEALTHY: 2}
    return (order.get(i.state, 0), -i.launched_at.timestamp(), i.id)


class Pools:
    def __init__(self, store: Store, backend: Backend, max_instances: int | None = None):
        self.store = store
        self.backend = backend
        self.max_instances = max_instances
        # Identifies this process in the key table: an in-progress key owned by
        # anyone else was interrupted by a crash.
        self.owner = uuid.uuid4().hex
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Quota check and launch must not interleave across pools.
        self._quota_lock = threading.Lock() if max_instances is not None else None

    @contextmanager
    def _pool_lock(self, pool: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(pool, threading.Lock())
        with lock:
            yield

    # --- the idempotency gate -------------------------------------------------

    def run(
        self, key: str, method: str, path: str, sha: str, pool: str, op: Callable[[Ctx], Result]
    ) -> tuple[int, Any]:
        """Run `op` for the request named by `key`, exactly once."""
        begun = self.store.begin(key, method, path, sha, self.owner)
        if begun.verdict == "replay":
            return begun.status, json.loads(begun.response)
        if begun.verdict == "mismatch":
            raise p.invalid(
                f"Idempotency-Key {key!r} was used for another request; a key names one request"
                f" (method, path and body), here {method} {path} with another body or path",
                422,
            )
        if begun.verdict == "busy":
            raise p.conflict(f"a request with Idempotency-Key {key!r} is in progress", retry_after=1)
        ctx = Ctx(self.store, key, begun.plan, begun.verdict == "resume")
        if ctx.resumed:
            log(f"resuming interrupted request {method} {path} (key {key}, plan {begun.plan})")
        with self._pool_lock(pool):
            try:
                status, body, apply = op(ctx)
                # Under the pool lock: no other request of this pool can read
                # the record between our decision and our commit.
                self.store.finish(key, status, body, apply)
            except BaseException:
                # Acted (plan saved): keep the key for a resume. Else forget it.
                try:
                    (self.store.suspend if ctx.saved else self.store.release)(key)
                except Exception as e:  # the original error matters more
                    log(f"could not update key {key}: {e}")
                raise
        return status, body

    def purge(self) -> None:
        n = self.store.purge(KEY_TTL)
        if n:
            log(f"purged {n} idempotency key(s) older than 24h")

    # --- helpers --------------------------------------------------------------

    def _record(self, name: str) -> PoolRecord:
        rec = self.store.pool(name)
        if rec is None:
            raise p.not_found(f"pool {name} does not exist (or is not managed: adopt it first)")
        return rec

    def _overlay(self, pool: str, listed: list[Instance]) -> list[Instance]:
        """Instances this plug-in launched moments ago that the listing does
        not show yet: reported as pending (read-your-writes)."""
        seen = {i.id for i in listed}
        cutoff = time.time() - RECENT_LAUNCH_WINDOW
        out = []
        for r in self.store.nodes_of([pool]):
            if r["id"] in seen or r["recorded_at"] is None or r["recorded_at"] < cutoff:
                continue
            if r["launched_at"] is None:
                continue
            if r["terminating_at"] is not None:
                continue
            out.append(Instance(
                id=r["id"], pool=pool, state=PENDING,
                launched_at=datetime.fromisoformat(r["launched_at"]), zone=r["zone"],
                template_hash=r["template_hash"], op=r["op"],
            ))
        return out

    def _instances(self, pool: str) -> list[Instance]:
        """Every instance of the pool (terminated too), as this plug-in knows
        them: the platform's listing, plus recent launches, with instances it
        asked to terminate shown as terminating."""
        listed = self.backend.list([pool])[pool]
        return self._merge(pool, listed)

    def _merge(self, pool: str, listed: list[Instance]) -> list[Instance]:
        terminating = {r["id"] for r in self.store.nodes_of([pool]) if r["terminating_at"] is not None}
        for i in listed:
            if i.id in terminating and i.state in LIVE:
                i.state = TERMINATING
        return listed + self._overlay(pool, listed)

    def _live(self, pool: str) -> list[Instance]:
        return [i for i in self._instances(pool) if i.live]

    def _check_quota(self, need: int) -> None:
        if self.max_instances is None:
            return
        live = self.backend.live_ids()
        cutoff = time.time() - RECENT_LAUNCH_WINDOW
        for r in self.store.read(
            "SELECT id FROM nodes WHERE recorded_at >= ? AND terminating_at IS NULL", (cutoff,)
        ):
            live.add(r["id"])
        if len(live) + need > self.max_instances:
            raise p.quota_exceeded(
                f"launching {need} instance(s) would make {len(live) + need}; this plug-in may hold"
                f" at most {self.max_instances} (--max-instances); nothing was launched"
            )

    def _launch(self, ctx: Ctx, pool: str, want: int, template: dict, thash: str, tags: dict, plan: dict) -> list[str]:
        """Make sure this request has launched `want` instances in all; return
        their ids. A resumed request counts what it launched before the crash
        (by its op stamp, in the platform and in our own records)."""
        mine: dict[str, float] = {}
        if ctx.resumed:
            for i in self.backend.list([pool])[pool]:
                if i.op == ctx.op:
                    mine[i.id] = i.launched_at.timestamp()
            for r in self.store.launched_by(ctx.op):
                at = datetime.fromisoformat(r["launched_at"]).timestamp() if r["launched_at"] else 0.0
                mine.setdefault(r["id"], at)
        need = want - len(mine)
        if need > 0:
            with self._quota_lock or nullcontext():
                self._check_quota(need)
                ctx.commit(plan)
                # Same key and same count already seen -> same token: if the
                # platform did launch them but does not list them yet, it
                # answers that launch again instead of launching twice.
                token = hashlib.sha256(f"{ctx.key}\n{len(mine)}\n{thash}".encode()).hexdigest()[:64]
                launch_delay()
                new = self.backend.launch(pool, template, thash, need, tags, ctx.op, token)
                crash_point("launch")
                self.store.record_launched(pool, ctx.op, [
                    {"id": i.id, "template_hash": thash, "zone": i.zone,
                     "launched_at": i.launched_at.isoformat()}
                    for i in new
                ])
            for i in new:
                mine[i.id] = i.launched_at.timestamp()
            log(f"pool {pool}: launched {need} ({', '.join(i.id for i in new)}) for key {ctx.key}")
        return [i for i, _ in sorted(mine.items(), key=lambda kv: (kv[1], kv[0]))]

    def _terminate(self, pool: str, ids: list[str]) -> None:
        if not ids:
            return
        self.backend.terminate(ids)
        crash_point("terminate")
        self.store.mark_terminating(pool, ids)
        log(f"pool {pool}: terminating {', '.join(ids)}")

    # --- reads ------------------------------------------------------------------

    def describe(self, names: list[str]) -> list[dict[str, Any]]:
        records = self.store.pools(names)
        listed = self.backend.list(names)  # one platform call for the batch
        now = datetime.now(timezone.utc)
        now_text = p.rfc3339(now)
        rows = {r["id"]: r for r in self.store.nodes_of(names)}
        running, not_running, gone = [], [], []
        out = []
        for name in names:
            rec = records.get(name)
            insts = self._merge(name, listed.get(name, []))
            live = [i for i in insts if i.live]
            if rec is None and not live:
                continue  # does not exist
            nodes = []
            hide = hidden_nodes()
            for i in sorted(insts, key=lambda i: (i.launched_at, i.id)):
                if i.state == TERMINATED:
                    gone.append(i.id)
                    continue
                if hide > 0 and i.live:
                    hide -= 1
                    continue
                node = {
                    "id": i.id,
                    "templateHash": i.template_hash if i.template_hash and p.TEMPLATE_HASH.match(i.template_hash)
                    else p.template_hash_of(i.template),
                    "state": i.state,
                    "launchedAt": p.rfc3339(i.launched_at),
                }
                if i.state == HEALTHY:
                    row = rows.get(i.id)
                    node["healthySince"] = (row["healthy_since"] if row and row["healthy_since"] else now_text)
                    running.append((i.id, name))
                else:
                    not_running.append(i.id)
                pid = self.backend.provider_id(i)
                if pid:
                    node["providerId"] = pid
                if i.zone:
                    node["zone"] = i.zone
                labels = {k: v for k, v in sorted(i.labels.items())[:64]
                          if 0 < len(k) <= 317 and len(v) <= 1024}
                if labels:
                    node["labels"] = labels
                nodes.append(node)
            if rec is not None:
                view = {
                    "name": name,
                    "size": rec.size,
                    "template": rec.template_obj(),
                    "inPlace": rec.in_place_obj(),
                    "nodes": nodes,
                }
                if rec.bounds:
                    view["bounds"] = json.loads(rec.bounds)
            else:
                # Instances carry the pool's tag but there is no record: a pool
                # this plug-in did not create. Shown so poolwright can adopt it.
                newest = max(live, key=lambda i: (i.launched_at, i.id))
                view = {"name": name, "size": len(live), "template": newest.template,
                        "inPlace": {}, "nodes": nodes}
            out.append(view)
        self.store.observe(running, not_running, gone, now_text)
        return out

    # --- mutations (each runs under run(): key gate + pool lock) ---------------

    def create_pool(self, ctx: Ctx, spec: dict[str, Any], thash: str) -> Result:
        name, size, template = spec["name"], spec["size"], spec["template"]
        in_place = spec.get("inPlace") or {}
        rec = self.store.pool(name)
        if rec is not None:
            if rec.created_by == ctx.key:
                return 201, {}, None  # created under this very key (an old, purged one)
            raise p.conflict(f"pool {name} exists")
        if ctx.plan is None:
            self.backend.verify_template(template)
            others = [i for i in self._live(name) if i.op != ctx.op]
            if others:
                raise p.conflict(
                    f"pool {name}: {len(others)} instance(s) carry its tag but it has no record here;"
                    " adopt it (spec.adopt: true) or terminate them"
                )
        plan = ctx.plan or {"launch": size}
        if plan["launch"]:
            self._launch(ctx, name, plan["launch"], template, thash, p.tags_of(in_place), plan)
        else:
            ctx.commit(plan)
        record = PoolRecord(
            name=name, size=size, template=p.compact(template), template_hash=thash,
            in_place=p.compact(in_place),
            bounds=p.compact(spec["autoscaling"]) if spec.get("autoscaling") else None,
            placement=p.compact(spec.get("placement") or {}), created_by=ctx.key,
        )
        return 201, {}, lambda c: Store.insert_pool(c, record)

    def set_size(self, ctx: Ctx, name: str, size: int) -> Result:
        rec = self._record(name)
        plan = ctx.plan
        if plan is None:
            live = self._live(name)
            if size >= len(live):
                plan = {"launch": size - len(live), "terminate": []}
            else:
                victims = sorted(live, key=_rank)[: len(live) - size]
                plan = {"launch": 0, "terminate": [i.id for i in victims]}
        if plan["terminate"]:
            ctx.commit(plan)
            self._terminate(name, plan["terminate"])
        if plan["launch"]:
            self._launch(ctx, name, plan["launch"], rec.template_obj(), rec.template_hash,
                         p.tags_of(rec.in_place_obj()), plan)
        return 200, {}, lambda c: Store.update_pool(c, name, size=size)

    def set_template(self, ctx: Ctx, name: str, template: dict[str, Any], thash: str) -> Result:
        self._record(name)
        self.backend.verify_template(template)
        # Running nodes are not touched; only future launches use it.
        return 200, {}, lambda c: Store.update_pool(
            c, name, template=p.compact(template), template_hash=thash
        )

    def create_nodes(self, ctx: Ctx, name: str, count: int, size: int) -> Result:
        rec = self._record(name)
        if ctx.plan is None and rec.size != size - count:
            raise p.conflict(
                f"pool {name} holds size {rec.size}, not {size - count} (size - count):"
                " it changed since this was decided; describe and decide again"
            )
        plan = ctx.plan or {"launch": count}
        ids = self._launch(ctx, name, plan["launch"], rec.template_obj(), rec.template_hash,
                           p.tags_of(rec.in_place_obj()), plan)
        return 200, {"nodes": ids}, lambda c: Store.update_pool(c, name, size=size)

    def terminate_node(self, ctx: Ctx, name: str, node: str, decrement: bool) -> Result:
        rec = self._record(name)
        plan = ctx.plan
        if plan is None:
            found = next((i for i in self._instances(name) if i.id == node), None)
            if found is None or found.state == TERMINATED:
                raise p.not_found(f"node {node} is not a node of pool {name}")
            # Already terminating is not an error: terminating again is a no-op.
            plan = {"terminate": [node], "launch": 0 if decrement else 1}
        ctx.commit(plan)
        self._terminate(name, plan["terminate"])
        if plan["launch"]:
            self._launch(ctx, name, plan["launch"], rec.template_obj(), rec.template_hash,
                         p.tags_of(rec.in_place_obj()), plan)
        if not decrement:
            return 200, {}, None
        # Relative to the record at commit time, in the done transaction: once.
        return 200, {}, lambda c: c.execute(
            "UPDATE pools SET size = MAX(size - 1, 0) WHERE name = ?", (name,)
        )

    def update_in_place(self, ctx: Ctx, name: str, in_place: dict[str, Any]) -> Result:
        rec = self._record(name)
        new, old = p.tags_of(in_place), p.tags_of(rec.in_place_obj())
        self.backend.check_tags(new)
        ids = [i.id for i in self._live(name)]
        ctx.commit({"attributes": True})
        # Whole set: every new tag (re)applied, tags no longer given removed.
        # Labels, annotations and taints are Kubernetes-side: stored only.
        if ids:
            self.backend.tag(ids, new)
            self.backend.untag(ids, sorted(set(old) - set(new)))
        return 200, {}, lambda c: Store.update_pool(c, name, in_place=p.compact(in_place))

    def set_bounds(self, ctx: Ctx, name: str, bounds: dict[str, int] | None) -> Result:
        self._record(name)
        return 200, {}, lambda c: Store.update_pool(c, name, bounds=p.compact(bounds) if bounds else None)

    def adopt(self, ctx: Ctx, name: str) -> Result:
        if self.store.pool(name) is not None:
            return 200, {}, None  # already managed
        live = self._live(name)
        if not live:
            raise p.not_found(f"no live instance carries pool {name}'s tag; nothing to adopt")
        # The record is made from what runs: size = live instances, template =
        # the newest instance's image and type (poolwright then sets its own).
        newest = max(live, key=lambda i: (i.launched_at, i.id))
        template = newest.template
        hashes = {i.id: p.template_hash_of(i.template) for i in live}
        ctx.commit({"adopt": True})
        self.backend.adopt(name, live, hashes)
        record = PoolRecord(
            name=name, size=len(live), template=p.compact(template),
            template_hash=p.template_hash_of(template), in_place="{}", bounds=None,
            placement="{}", created_by=ctx.key,
        )
        return 200, {}, lambda c: Store.insert_pool(c, record)

    def delete_pool(self, ctx: Ctx, name: str) -> Result:
        rec = self.store.pool(name)
        live = self._live(name)
        if rec is None and not live and ctx.plan is None:
            raise p.not_found(f"pool {name} does not exist")
        ctx.commit({"delete": True})
        self._terminate(name, [i.id for i in live])
        return 200, {}, lambda c: Store.delete_pool(c, name)
