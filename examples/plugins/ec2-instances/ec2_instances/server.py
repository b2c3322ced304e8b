"""HTTP: routing, bearer token, body limits, request checks and problem
details. Platform-neutral: everything it does to pools goes through Pools;
channel images, which involve no pool, no key and no state, come straight
from the Backend.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import unquote

from . import protocol as p
from .pools import Pools

MAX_BODY = 1024 * 1024
MAX_TOKEN_FILE = 64 * 1024
KEY_HEADER = "Idempotency-Key"
KEY_CHARS = re.compile(r"^[\x21-\x7e]{1,255}$")
SEGMENT = r"(?P<{}>[^/]+)"
POOL, NODE = SEGMENT.format("pool"), SEGMENT.format("node")
CHANNEL = SEGMENT.format("channel")

# (method, path pattern, handler, mutating). Mutating calls need a key.
ROUTES: list[tuple[str, re.Pattern, str, bool]] = [
    (m, re.compile(f"^{path}$"), h, mut)
    for m, path, h, mut in [
        ("GET", "/v1/capabilities", "get_capabilities", False),
        ("POST", "/v1/describe", "describe", False),
        ("GET", f"/v1/channels/{CHANNEL}/images", "channel_images", False),
        ("POST", "/v1/pools", "create_pool", True),
        ("DELETE", f"/v1/pools/{POOL}", "delete_pool", True),
        ("POST", f"/v1/pools/{POOL}/adopt", "adopt", True),
        ("PUT", f"/v1/pools/{POOL}/attributes", "attributes", True),
        ("PUT", f"/v1/pools/{POOL}/bounds", "bounds", True),
        ("PUT", f"/v1/pools/{POOL}/size", "size", True),
        ("PUT", f"/v1/pools/{POOL}/template", "template", True),
        ("POST", f"/v1/pools/{POOL}/nodes", "create_nodes", True),
        ("POST", f"/v1/pools/{POOL}/nodes/{NODE}/terminate", "terminate", True),
        ("POST", f"/v1/pools/{POOL}/nodes/{NODE}/reimage", "reimage", True),
    ]
]


class TokenFile:
    """The bearer token, read again whenever the file changes (rotation
    without a restart)."""

    def __init__(self, path: str):
        self.path = path
        self._cache: tuple[int, int, str] | None = None
        self._lock = threading.Lock()

    def current(self) -> str:
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                # A FIFO would block the read forever.
                raise ValueError("not a regular file")
            with self._lock:
                if self._cache and self._cache[:2] == (st.st_mtime_ns, st.st_size):
                    return self._cache[2]
                with open(self.path, "rb") as f:
                    token = f.read(MAX_TOKEN_FILE + 1).decode("utf-8").strip()
                if not token or st.st_size > MAX_TOKEN_FILE:
                    raise ValueError("empty or too large")
                self._cache = (st.st_mtime_ns, st.st_size, token)
                return token
        except (OSError, ValueError) as e:
            # Fail closed: no token to compare with, no request passes.
            print(f"ec2-instances: token file {self.path}: {e}", file=sys.stderr, flush=True)
            raise p.unavailable("the plug-in cannot read its token file; see its log") from None


class App:
    """One request in, (status, body, headers) out; no sockets involved."""

    def __init__(self, pools: Pools, token: TokenFile | None, poll_interval: int):
        self.pools = pools
        self.token = token
        self.poll_interval = poll_interval
        self.backend = pools.backend
        # In-flight mutations, so a SIGTERM can let them finish.
        self.busy = 0
        self.idle = threading.Condition()

    def capabilities(self) -> dict[str, Any]:
        return {
            "protocol": p.PROTOCOL,
            "name": self.backend.name,
            "version": self.backend.version,
            "reimage": False,
            "describeBatchSize": 100,
            "pollIntervalSeconds": self.poll_interval,
            "templateFields": list(self.backend.template_fields),
        }

    def authorize(self, header: str | None) -> None:
        if self.token is None:
            return
        want = self.token.current()
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), want.encode()):
            raise p.Problem(
                401, "invalid", "a valid bearer token is required (Authorization: Bearer TOKEN)",
                headers={"WWW-Authenticate": 'Bearer realm="ec2-instances"'},
            )

    def handle(self, method: str, raw_path: str, headers, body: bytes) -> tuple[int, Any, dict[str, str]]:
        self.authorize(headers.get("Authorization"))
        path = raw_path.split("?", 1)[0]
        allowed = []
        for m, pattern, name, mutating in ROUTES:
            match = pattern.match(path)
            if not match:
                continue
            if m != method:
                allowed.append(m)
                continue
            args = {k: unquote(v) for k, v in match.groupdict().items()}
            if name == "reimage":
                raise p.Problem(501, "unsupported", "this plug-in does not reimage nodes (capabilities: reimage false)")
            if not mutating:
                return 200, getattr(self, name)(body, **args), {}
            key = headers.get(KEY_HEADER)
            if key is None:
                raise p.invalid(f"{method} {path} changes something: the {KEY_HEADER} header is required")
            if not KEY_CHARS.match(key):
                raise p.invalid(f"{KEY_HEADER} must be 1 to 255 visible ASCII characters")
            parsed = p.parse_json(body) if body.strip() else None
            sha = hashlib.sha256(p.canonical(parsed).encode() if parsed is not None else b"").hexdigest()
            pool, op = getattr(self, name)(parsed, **args)
            with self.idle:
                self.busy += 1
            try:
                status, answer = self.pools.run(key, method, path, sha, pool, op)
            finally:
                with self.idle:
                    self.busy -= 1
                    self.idle.notify_all()
            return status, answer, {}
        if allowed:
            raise p.Problem(405, "invalid", f"{method} is not allowed on {path}",
                            headers={"Allow": ", ".join(allowed)})
        raise p.not_found(f"no such endpoint: {path}")

    # --- reads --------------------------------------------------------------------

    def get_capabilities(self, _body: bytes) -> dict[str, Any]:
        return self.capabilities()

    def describe(self, body: bytes) -> dict[str, Any]:
        req = p.as_object(p.parse_json(body), "body")
        names = req.get("pools")
        if not isinstance(names, list):
            raise p.invalid("pools: expected an array of pool names")
        if len(names) > 100:
            raise p.invalid(f"pools: {len(names)} names; describeBatchSize is 100")
        names = list(dict.fromkeys(p.check_pool_name(n, "pools[]") for n in names))
        return {"pools": self.pools.describe(names) if names else []}

    def channel_images(self, _body: bytes, channel: str) -> dict[str, Any]:
        p.check_channel_name(channel)
        images = self.backend.channel_images(channel)
        if not images:
            # Unknown and empty are one answer: poolwright needs an image to
            # follow, and 404 tells it the channel is not served here.
            raise p.not_found(f"channel {channel!r}: this plug-in offers no image on it")
        # Newest first, capped at the contract's limit: poolwright follows the
        # newest eligible image, so the oldest are the ones it can do without.
        images.sort(key=lambda i: i.released, reverse=True)
        return {
            "images": [
                {"image": i.id, "released": p.rfc3339(i.released)}
                for i in images[: p.MAX_CHANNEL_IMAGES]
            ]
        }

    # --- mutations: check the body, then name the pool and the operation ---------
    # Each returns (pool to lock, operation(ctx)); Pools.run does the rest.

    def _body(self, parsed: Any) -> dict[str, Any]:
        return p.as_object(parsed if parsed is not None else {}, "body")

    def _template(self, v: Any, where: str) -> dict[str, Any]:
        t = p.check_template(v, self.backend.template_fields, where)
        self.backend.check_template(t)
        return t

    def _in_place(self, v: Any, where: str) -> dict[str, Any]:
        a = p.check_in_place(v, where)
        self.backend.check_tags(p.tags_of(a))
        return a

    def create_pool(self, parsed: Any) -> tuple[str, Callable]:
        req = self._body(parsed)
        if "pool" not in req:
            raise p.invalid("pool: required")
        spec = p.as_object(req["pool"], "pool")
        name = p.check_pool_name(spec.get("name"), "pool.name")
        if "size" not in spec:
            raise p.invalid("pool.size: required")
        p.as_uint(spec["size"], "pool.size")
        if "template" not in spec:
            raise p.invalid("pool.template: required")
        self._template(spec["template"], "pool.template")
        spec["inPlace"] = self._in_place(spec.get("inPlace"), "pool.inPlace")
        spec["autoscaling"] = p.check_bounds(spec.get("autoscaling"), "pool.autoscaling")
        if spec.get("placement") is not None:
            p.as_object(spec["placement"], "pool.placement")
        thash = p.check_template_hash(req.get("templateHash"))
        return name, lambda ctx: self.pools.create_pool(ctx, spec, thash)

    def delete_pool(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        return pool, lambda ctx: self.pools.delete_pool(ctx, pool)

    def adopt(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        self._body(parsed)
        return pool, lambda ctx: self.pools.adopt(ctx, pool)

    def attributes(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        attrs = self._in_place(self._body(parsed), "body")
        return pool, lambda ctx: self.pools.update_in_place(ctx, pool, attrs)

    def bounds(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        b = p.check_bounds(self._body(parsed).get("bounds"), "bounds")
        return pool, lambda ctx: self.pools.set_bounds(ctx, pool, b)

    def size(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        req = self._body(parsed)
        if "size" not in req:
            raise p.invalid("size: required")
        size = p.as_uint(req["size"], "size")
        return pool, lambda ctx: self.pools.set_size(ctx, pool, size)

    def template(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        req = self._body(parsed)
        if "template" not in req:
            raise p.invalid("template: required")
        t = self._template(req["template"], "template")
        thash = p.check_template_hash(req.get("templateHash"))
        return pool, lambda ctx: self.pools.set_template(ctx, pool, t, thash)

    def create_nodes(self, parsed: Any, pool: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        req = self._body(parsed)
        for f in ("count", "size"):
            if f not in req:
                raise p.invalid(f"{f}: required")
        count, size = p.as_uint(req["count"], "count", 1), p.as_uint(req["size"], "size", 1)
        return pool, lambda ctx: self.pools.create_nodes(ctx, pool, count, size)

    def terminate(self, parsed: Any, pool: str, node: str) -> tuple[str, Callable]:
        p.check_pool_name(pool)
        req = self._body(parsed)
        if not isinstance(req.get("decrement"), bool):
            raise p.invalid("decrement: required, a boolean")
        dec = req["decrement"]
        return pool, lambda ctx: self.pools.terminate_node(ctx, pool, node, dec)

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.idle:
            while self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.idle.wait(left)
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: poolwright reuses connections
    server_version = "ec2-instances/1.0.0"

    def version_string(self) -> str:
        return self.server_version
    timeout = 60  # an idle or slow connection does not hold a thread forever
    app: App  # set on the server-specific subclass

    def _respond(self, status: int, body: Any, headers: dict[str, str], problem: bool = False) -> None:
        data = (p.compact(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json" if problem else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in headers.items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _problem(self, e: p.Problem) -> None:
        headers = dict(e.headers)
        if e.retry_after is not None:
            headers["Retry-After"] = str(e.retry_after)
        self._respond(e.status, e.body(), headers, problem=True)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise p.invalid("chunked request bodies are not accepted; send Content-Length")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise p.invalid("Content-Length is not a number") from None
        if n < 0 or n > MAX_BODY:
            self.close_connection = True  # the unread body cannot stay on the connection
            raise p.Problem(413, "invalid", f"the body is larger than {MAX_BODY} bytes")
        return self.rfile.read(n) if n else b""

    def _any(self) -> None:
        started = time.monotonic()
        status = 0
        try:
            try:
                body = self._read_body()
                status, answer, headers = self.app.handle(self.command, self.path, self.headers, body)
                self._respond(status, answer, headers)
            except p.Problem as e:
                status = e.status
                self._problem(e)
            except Exception:
                # A bug or an unexpected failure: the traceback goes to the log,
                # never to the client.
                traceback.print_exc(file=sys.stderr)
                status = 503
                self._problem(p.unavailable("internal error in the plug-in; see its log"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        key = self.headers.get(KEY_HEADER)
        print(
            f"ec2-instances: {self.command} {self.path} {status} {1000 * (time.monotonic() - started):.0f}ms"
            + (f" key={key}" if key else ""),
            file=sys.stderr, flush=True,
        )

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _any

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed request lines and the like: a problem document, not HTML.
        self.close_connection = True
        kind = "unsupported" if code == 501 else "invalid" if code < 500 else "unavailable"
        try:
            self._problem(p.Problem(code, kind, message or "bad request"))
        except Exception:
            pass  # the client is gone or spoke no HTTP at all

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass  # _any logs one line per request itself

    def log_message(self, format: str, *args: Any) -> None:
        print(f"ec2-instances: {self.address_string()} {format % args}", file=sys.stderr, flush=True)


class Server(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not block exit
    allow_reuse_address = True


def make_server(app: App, host: str, port: int) -> Server:
    import socket

    handler = type("BoundHandler", (Handler,), {"app": app})
    cls = Server
    if ":" in host:
        cls = type("Server6", (Server,), {"address_family": socket.AF_INET6})
    return cls((host, port), handler)
