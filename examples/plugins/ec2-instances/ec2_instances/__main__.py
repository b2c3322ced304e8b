"""Entry point: flags and environment, wiring, serving, graceful stop."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading

from . import pools as pools_mod
from .ec2 import Ec2Backend
from .pools import Pools
from .server import App, TokenFile, make_server
from .store import Store


def env(name: str, default: str | None = None) -> str | None:
    v = os.environ.get(name)
    return v if v else default


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT (e.g. 127.0.0.1:9480)")
    return host.strip("[]") or "127.0.0.1", int(port)


def positive(lo: int, hi: int):
    def check(text: str) -> int:
        if not text.isdigit() or not lo <= int(text) <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer from {lo} to {hi}")
        return int(text)
    return check


def args(argv: list[str] | None = None) -> argparse.Namespace:
    a = argparse.ArgumentParser(
        prog="ec2-instances",
        description="poolwright provider plug-in: node pools as plain EC2 instances.",
    )
    a.add_argument("--listen", type=parse_listen, default=env("EC2_INSTANCES_LISTEN", "127.0.0.1:9480"),
                   help="HOST:PORT to serve on; port 0 picks one (env EC2_INSTANCES_LISTEN; default 127.0.0.1:9480)")
    a.add_argument("--state", default=env("EC2_INSTANCES_STATE", "./ec2-instances.sqlite"),
                   help="SQLite file for pools and idempotency keys (env EC2_INSTANCES_STATE)")
    a.add_argument("--region", default=env("AWS_REGION", env("AWS_DEFAULT_REGION")),
                   help="AWS region (else AWS_REGION, AWS_DEFAULT_REGION)")
    a.add_argument("--endpoint-url", default=env("AWS_ENDPOINT_URL"),
                   help="EC2 endpoint override, e.g. moto or a VPC endpoint (else AWS_ENDPOINT_URL)")
    a.add_argument("--max-instances", type=positive(0, 10**6), default=env("EC2_INSTANCES_MAX_INSTANCES"),
                   help="refuse launches beyond this many live instances across pools (403 quota-exceeded)")
    a.add_argument("--poll-interval", type=positive(1, 3600), default=env("EC2_INSTANCES_POLL_INTERVAL", "2"),
                   help="pollIntervalSeconds suggested to poolwright, 1 to 3600 (default 2)")
    a.add_argument("--token-file", default=env("EC2_INSTANCES_TOKEN_FILE"),
                   help="require Authorization: Bearer <contents of FILE> (re-read when it changes)")
    # (argparse runs string defaults, i.e. the environment's, through `type` too.)
    ns = a.parse_args(argv)
    if not ns.region:
        a.error("no AWS region: pass --region or set AWS_REGION")
    return ns


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) we are serving; a no-op elsewhere."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(message.encode())
    except OSError as e:
        print(f"ec2-instances: sd_notify: {e}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ns = args(argv)
    store = Store(ns.state)
    pools = Pools(store, Ec2Backend(ns.region, ns.endpoint_url), ns.max_instances)
    pools.purge()
    app = App(pools, TokenFile(ns.token_file) if ns.token_file else None, ns.poll_interval)
    host, port = ns.listen
    server = make_server(app, host, port)
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    # The one line on stdout: a harness started with port 0 reads the port here.
    print(f"listening on http://{shown}:{bound_port}", flush=True)
    print(
        f"ec2-instances: region {ns.region}, state {ns.state}"
        + (f", endpoint {ns.endpoint_url}" if ns.endpoint_url else "")
        + (f", max {ns.max_instances} instances" if ns.max_instances is not None else "")
        + (", bearer token required" if ns.token_file else "")
        + (f", TEST HOOK {pools_mod.CRASH_ENV}={os.environ[pools_mod.CRASH_ENV]}"
           if os.environ.get(pools_mod.CRASH_ENV) else "")
        + (f", TEST HOOK {pools_mod.DELAY_ENV}={os.environ[pools_mod.DELAY_ENV]}"
           if os.environ.get(pools_mod.DELAY_ENV) else "")
        + (f", TEST HOOK {pools_mod.HIDE_ENV}={os.environ[pools_mod.HIDE_ENV]}"
           if os.environ.get(pools_mod.HIDE_ENV) else ""),
        file=sys.stderr, flush=True,
    )

    def stop(signum, _frame):
        print(f"ec2-instances: signal {signum}: stopping", file=sys.stderr, flush=True)
        sd_notify("STOPPING=1")
        # shutdown() waits for serve_forever, so not from this (the main) thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def purge_hourly():
        while not stopped.wait(3600):
            try:
                pools.purge()
            except Exception as e:
                print(f"ec2-instances: purge: {e}", file=sys.stderr, flush=True)

    stopped = threading.Event()
    threading.Thread(target=purge_hourly, daemon=True).start()
    sd_notify("READY=1")
    server.serve_forever(poll_interval=0.5)
    stopped.set()
    # Let requests in flight finish (a kill is safe too: keys resume).
    if not app.wait_idle(25):
        print("ec2-instances: requests still in flight at exit; they resume when retried", file=sys.stderr)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
