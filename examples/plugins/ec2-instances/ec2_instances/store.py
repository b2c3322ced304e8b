"""Durable state in one SQLite file: pool records, idempotency keys and what
the plug-in itself did to nodes. Platform-neutral.

Why SQLite: a kill -9 at any instant must leave either the old or the new
state, never half of each; one transaction covers "the pool's size changed"
and "this key is done", so a retried decrement can never count twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS pools (
    name          TEXT PRIMARY KEY,
    size          INTEGER NOT NULL,
    template      TEXT NOT NULL,     -- JSON exactly as poolwright sent it
    template_hash TEXT NOT NULL,
    in_place      TEXT NOT NULL,     -- JSON: labels, annotations, taints, tags
    bounds        TEXT,              -- JSON {min, max} or NULL
    placement     TEXT NOT NULL,     -- JSON, stored for reference only
    created_by    TEXT,              -- idempotency key of the create/adopt
    created_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    key         TEXT PRIMARY KEY,    -- Idempotency-Key
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    body_sha256 TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('in-progress', 'done')),
    owner       TEXT,                -- process running it now; NULL = interrupted
    plan        TEXT,                -- JSON: what the first attempt decided to do
    status      INTEGER,
    response    TEXT,
    created_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
    id             TEXT PRIMARY KEY,
    pool           TEXT NOT NULL,
    template_hash  TEXT,
    zone           TEXT,
    launched_at    TEXT,
    op             TEXT,             -- idempotency key of the launching request
    recorded_at    REAL,             -- when this plug-in launched it (NULL: only seen)
    terminating_at REAL,             -- when this plug-in asked to terminate it
    healthy_since  TEXT              -- first seen running (reset when it stops)
);
CREATE INDEX IF NOT EXISTS nodes_pool ON nodes (pool);
CREATE INDEX IF NOT EXISTS nodes_op ON nodes (op);
"""


@dataclass
class Begun:
    """What the key table says about an incoming mutating request."""

    verdict: str  # new | resume | replay | busy | mismatch
    plan: dict[str, Any] | None = None
    status: int | None = None
    response: str | None = None


@dataclass
class PoolRecord:
    name: str
    size: int
    template: str  # JSON text
    template_hash: str
    in_place: str  # JSON text
    bounds: str | None
    placement: str
    created_by: str | None

    def template_obj(self) -> dict[str, Any]:
        return json.loads(self.template)

    def in_place_obj(self) -> dict[str, Any]:
        return json.loads(self.in_place)


class Store:
    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    # One connection per thread: sqlite3 connections are not shared safely,
    # and WAL lets describes read while a mutation writes.
    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            c.row_factory = sqlite3.Row
            c.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed "done" survives a power cut, not only a kill.
            c.execute("PRAGMA synchronous=FULL")
            self._local.conn = c
        return c

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front, so two threads that
        both read "key unknown" cannot both insert it."""
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    def read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        return self._conn().execute(sql, args).fetchall()

    # --- idempotency keys ---------------------------------------------------

    def purge(self, max_age: float) -> int:
        """Forget keys older than `max_age` seconds, and the launch records
        that only served them (nodes not running now)."""
        cutoff = time.time() - max_age
        with self.tx() as c:
            c.execute(
                "DELETE FROM nodes WHERE COALESCE(recorded_at, 0) < ? AND healthy_since IS NULL",
                (cutoff,),
            )
            return c.execute("DELETE FROM requests WHERE created_at < ?", (cutoff,)).rowcount

    def begin(self, key: str, method: str, path: str, sha: str, owner: str) -> Begun:
        with self.tx() as c:
            row = c.execute("SELECT * FROM requests WHERE key = ?", (key,)).fetchone()
            if row is None:
                c.execute(
                    "INSERT INTO requests (key, method, path, body_sha256, state, owner, created_at)"
                    " VALUES (?, ?, ?, ?, 'in-progress', ?, ?)",
                    (key, method, path, sha, owner, time.time()),
                )
                return Begun("new")
            if (row["method"], row["path"], row["body_sha256"]) != (method, path, sha):
                return Begun("mismatch")
            if row["state"] == "done":
                return Begun("replay", status=row["status"], response=row["response"])
            if row["owner"] == owner:
                # This very process is running it: a concurrent duplicate.
                return Begun("busy")
            # Interrupted (a crash: another owner; or a failed attempt: NULL).
            # Take it over in this transaction, so only one retry resumes.
            c.execute("UPDATE requests SET owner = ? WHERE key = ?", (owner, key))
            plan = json.loads(row["plan"]) if row["plan"] else None
            return Begun("resume", plan=plan)

    def save_plan(self, key: str, plan: dict[str, Any]) -> None:
        with self.tx() as c:
            c.execute("UPDATE requests SET plan = ? WHERE key = ?", (json.dumps(plan), key))

    def finish(
        self,
        key: str,
        status: int,
        response: Any,
        apply: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        """The request's effect on the records and "done" in ONE transaction."""
        with self.tx() as c:
            if apply is not None:
                apply(c)
            c.execute(
                "UPDATE requests SET state = 'done', owner = NULL, status = ?, response = ?"
                " WHERE key = ?",
                (status, json.dumps(response), key),
            )

    def release(self, key: str) -> None:
        """Forget a request that acted on nothing (refused): a later attempt
        with the same key is judged afresh (quota may have freed up)."""
        with self.tx() as c:
            c.execute("DELETE FROM requests WHERE key = ? AND state = 'in-progress'", (key,))

    def suspend(self, key: str) -> None:
        """A request that may have acted but did not finish: the next attempt
        with the same key resumes it from its plan."""
        with self.tx() as c:
            c.execute("UPDATE requests SET owner = NULL WHERE key = ? AND state = 'in-progress'", (key,))

    # --- pools --------------------------------------------------------------

    def pool(self, name: str) -> PoolRecord | None:
        rows = self.pools([name])
        return rows.get(name)

    def pools(self, names: list[str]) -> dict[str, PoolRecord]:
        if not names:
            return {}
        marks = ",".join("?" * len(names))
        rows = self.read(f"SELECT * FROM pools WHERE name IN ({marks})", tuple(names))
        return {
            r["name"]: PoolRecord(
                r["name"], r["size"], r["template"], r["template_hash"], r["in_place"],
                r["bounds"], r["placement"], r["created_by"],
            )
            for r in rows
        }

    @staticmethod
    def insert_pool(c: sqlite3.Connection, rec: PoolRecord) -> None:
        c.execute(
            "INSERT INTO pools (name, size, template, template_hash, in_place, bounds,"
            " placement, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.name, rec.size, rec.template, rec.template_hash, rec.in_place,
             rec.bounds, rec.placement, rec.created_by, time.time()),
        )

    @staticmethod
    def update_pool(c: sqlite3.Connection, name: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        c.execute(f"UPDATE pools SET {cols} WHERE name = ?", (*fields.values(), name))

    @staticmethod
    def delete_pool(c: sqlite3.Connection, name: str) -> None:
        c.execute("DELETE FROM pools WHERE name = ?", (name,))
        c.execute("DELETE FROM nodes WHERE pool = ?", (name,))

    # --- nodes this plug-in launched or terminated ----------------------------

    def record_launched(self, pool: str, op: str, nodes: list[dict[str, Any]]) -> None:
        """Right after the platform answered a launch: a describe that does not
        see the new instances yet (EC2 is eventually consistent) still can."""
        now = time.time()
        with self.tx() as c:
            c.executemany(
                "INSERT INTO nodes (id, pool, template_hash, zone, launched_at, op, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
                # A describe may have seen it first (a healthy-since row): keep
                # that, fill in the rest.
                " template_hash = excluded.template_hash, zone = excluded.zone,"
                " launched_at = excluded.launched_at, op = excluded.op,"
                " recorded_at = excluded.recorded_at",
                [(n["id"], pool, n["template_hash"], n["zone"], n["launched_at"], op, now) for n in nodes],
            )

    def mark_terminating(self, pool: str, ids: list[str]) -> None:
        now = time.time()
        with self.tx() as c:
            c.executemany(
                "INSERT INTO nodes (id, pool, terminating_at) VALUES (?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET terminating_at ="
                " COALESCE(nodes.terminating_at, excluded.terminating_at)",
                [(i, pool, now) for i in ids],
            )

    def nodes_of(self, pools: list[str]) -> list[sqlite3.Row]:
        if not pools:
            return []
        marks = ",".join("?" * len(pools))
        return self.read(f"SELECT * FROM nodes WHERE pool IN ({marks})", tuple(pools))

    def launched_by(self, op: str) -> list[sqlite3.Row]:
        return self.read("SELECT * FROM nodes WHERE op = ?", (op,))

    def observe(
        self,
        running: list[tuple[str, str]],
        not_running: list[str],
        gone: list[str],
        now_text: str,
    ) -> None:
        """What a describe saw: `running` (id, pool) become healthy from now
        unless already; `not_running` lose their healthy-since; `gone`
        (terminated) are forgotten, except launch records a resumed request
        may still count (kept until the key itself is purged)."""
        if not (running or not_running or gone):
            return
        with self.tx() as c:
            c.executemany(
                "INSERT INTO nodes (id, pool, healthy_since) VALUES (?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET healthy_since ="
                " COALESCE(nodes.healthy_since, excluded.healthy_since)",
                [(i, p, now_text) for i, p in running],
            )
            c.executemany("UPDATE nodes SET healthy_since = NULL WHERE id = ?", [(i,) for i in not_running])
            c.executemany(
                "UPDATE nodes SET healthy_since = NULL WHERE id = ?", [(i,) for i in gone]
            )
            c.executemany(
                "DELETE FROM nodes WHERE id = ? AND recorded_at IS NULL", [(i,) for i in gone]
            )

    def forget_nodes(self, ids: list[str]) -> None:
        with self.tx() as c:
            c.executemany("DELETE FROM nodes WHERE id = ?", [(i,) for i in ids])
