#!/usr/bin/env python3
"""A re-runnable red-team campaign against the poolwright binary.

    python3 scripts/reliability/campaign.py --bin target/debug/poolwright \
        [--only CATEGORY[,CATEGORY...]] [--yaml-suite tests/data/yaml-test-suite/cases.json] \
        [--kill-trials 80] [--seed N] [--keep]

Categories: yaml-suite, adversarial-files, http-abuse, kill-9, disk-faults.

Prints one Markdown table (category | cases | hangs | crashes | data loss |
unauthorised state changes | notes) and then the details of every failing case.
Exits 1 when any hang, crash, data loss or unauthorised state change was seen
(or a positive control failed), 0 otherwise; 2 on usage errors.

Definitions:
- hang: a command not finishing within its deadline (20 s for validate/plan);
  for the daemon, /healthz not answering within 5 s from a fresh connection, or
  the process not exiting within shutdown grace + 5 s after SIGTERM;
- crash: killed by a signal we did not send, exit code 101 (Rust panic),
  "panicked" in stderr, or an allocation failure abort;
- data loss: pools/nodes/state lost or corrupt (fleet no longer parses), or, in
  kill-9, a node terminated twice, the final node count off, extra launches;
- unauthorised state change: state changed by an input that must not change
  anything (an invalid desired state, a plan, a hostile HTTP request answered
  2xx, a side effect without a journal).

Counts are per case: a case that hangs in two commands counts once in "hangs"
(every command is listed in the details).

Only Python 3 stdlib. Runs as root (mount tests need it). Every child process
has a deadline and runs in its own process group (killed as a group), every
child runs under `prlimit --as` (3 GiB address space, no core files), temp dirs
are removed and mounts unmounted in `finally`. Network traffic only to
127.0.0.1 and Unix sockets.
"""

import argparse
import collections
import errno
import fcntl
import hashlib
import json
import os
import random
import re
import resource
import select
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples")

BIN = None
AS_LIMIT = 3 << 30
TMP_ROOT = None
HOME = None
MOUNTS = []          # mountpoints to unmount, in order of mounting
DAEMONS = set()      # live Daemon objects
LOCK = threading.Lock()
VERBOSE = False

CATEGORIES = ["yaml-suite", "adversarial-files", "http-abuse", "kill-9", "disk-faults"]


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------
# results


class Category:
    def __init__(self, name):
        self.name = name
        self.cases = 0
        self.kinds = {"hang": set(), "crash": set(), "loss": set(), "unauth": set(), "control": set()}
        self.failures = []   # (kind, case, command, what)
        self.notes = []

    def fail(self, kind, case, command, what):
        with LOCK:
            self.kinds[kind].add(case)
            self.failures.append((kind, case, command, what))

    def note(self, text):
        with LOCK:
            self.notes.append(text)

    def count(self, kind):
        return len(self.kinds[kind])

    def failed(self):
        return any(self.kinds[k] for k in self.kinds)


KIND_NAMES = {"hang": "HANG", "crash": "CRASH", "loss": "DATA LOSS", "unauth": "UNAUTHORISED",
              "control": "POSITIVE CONTROL FAILED"}


def short(text, n=400):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.strip()
    if len(text) > n:
        text = text[: n // 2] + " [...] " + text[-n // 2:]
    return text.replace("\n", " | ")


# --------------------------------------------------------------------------
# processes


class Res:
    def __init__(self, cmd, rc, timed_out, elapsed, stdout, stderr):
        self.cmd, self.rc, self.timed_out, self.elapsed = cmd, rc, timed_out, elapsed
        self.stdout, self.stderr = stdout, stderr

    def describe(self):
        if self.timed_out:
            return f"no exit within {self.elapsed:.1f}s (killed)"
        if self.rc is not None and self.rc < 0:
            return f"killed by {signame(-self.rc)} after {self.elapsed:.1f}s"
        return f"exit {self.rc} after {self.elapsed:.1f}s"


def signame(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def child_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POOLWRIGHT_", "AWS_", "KUBECONFIG", "RUST_LOG"))}
    env["NO_COLOR"] = "1"
    env["RUST_BACKTRACE"] = "1"
    env["HOME"] = HOME
    return env


def wrap(args):
    return ["prlimit", f"--as={AS_LIMIT}", "--core=0", "--", BIN] + [str(a) for a in args]


def read_capped(f, cap=256 * 1024):
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    if size <= cap:
        return f.read().decode("utf-8", "replace")
    head = f.read(cap // 2)
    f.seek(size - cap // 2)
    tail = f.read()
    return (head + b"\n[... %d bytes ...]\n" % (size - cap) + tail).decode("utf-8", "replace")


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.kill()
    except ProcessLookupError:
        pass


def run(args, timeout=20.0, cwd=None, stdin=None):
    """Run the binary with `args`; never longer than `timeout` (then the process
    group is SIGKILLed). stdin: None (/dev/null) or a file descriptor."""
    cmd = wrap(args)
    with tempfile.TemporaryFile(dir=TMP_ROOT) as out, tempfile.TemporaryFile(dir=TMP_ROOT) as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                             stdout=out, stderr=err, cwd=cwd or TMP_ROOT, env=child_env(),
                             start_new_session=True)
        timed_out = False
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(p)
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
        elapsed = time.monotonic() - t0
        if not timed_out:
            # stragglers of the group (none expected)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return Res(cmd, rc, timed_out, elapsed, read_capped(out), read_capped(err))


def crash_reason(r, sent=()):
    if r is None:
        return None
    if r.rc is not None and r.rc < 0 and not r.timed_out and -r.rc not in sent:
        return f"killed by {signame(-r.rc)}"
    if r.rc == 101:
        return "exit 101 (Rust panic)"
    m = re.search(r"^.*panicked.*$", r.stderr, re.M)
    if m:
        return "panicked: " + m.group(0)[:300]
    m = re.search(r"memory allocation of \d+ bytes failed", r.stderr)
    if m:
        return "abort: " + m.group(0)
    return None


def check(cat, case, what, r, deadline_note=""):
    """Record hang/crash of a finished run; return True when clean."""
    ok = True
    if r.timed_out:
        cat.fail("hang", case, what, f"{r.describe()}{deadline_note}; stderr: {short(r.stderr, 300)}")
        ok = False
    c = crash_reason(r)
    if c:
        cat.fail("crash", case, what, f"{c} ({r.describe()}); stderr: {short(r.stderr, 600)}")
        ok = False
    return ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    """`poolwright run` in its own process group, output to files."""

    def __init__(self, cfg, state, port=None, grace=10, extra=()):
        self.cfg, self.state, self.grace = cfg, state, grace
        self.port = port or free_port()
        self.extra = list(extra)
        self.p = None
        self.sent = set()
        self.out = self.err = None

    def start(self):
        args = ["run", self.cfg, "--state-dir", self.state, "--listen", f"127.0.0.1:{self.port}",
                "--shutdown-grace", f"{self.grace}s"] + self.extra
        self.cmd = wrap(args)
        self.out = tempfile.TemporaryFile(dir=TMP_ROOT)
        self.err = tempfile.TemporaryFile(dir=TMP_ROOT)
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err,
                                  cwd=TMP_ROOT, env=child_env(), start_new_session=True)
        self.t0 = time.monotonic()
        with LOCK:
            DAEMONS.add(self)
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def rc(self):
        return self.p.poll()

    def stderr(self):
        if not self.err:
            return ""
        return read_capped(self.err)

    def wait_http(self, path="/readyz", want=200, timeout=60):
        """Poll until `path` answers `want`; False on timeout or exit."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                return False
            r = http_exchange(("tcp", self.port), build("GET", path, port=self.port), timeout=2)
            if r["status"] == want:
                return True
            time.sleep(0.2)
        return False

    def signal(self, sig):
        self.sent.add(sig)
        try:
            os.kill(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def sigkill(self):
        self.sent.add(signal.SIGKILL)
        kill_group(self.p)
        self.p.wait()
        self.finish()

    def terminate(self):
        """SIGTERM; (exited_in_time, seconds, rc)."""
        if not self.alive():
            self.finish()
            return True, 0.0, self.p.poll()
        self.signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            self.p.wait(self.grace + 5)
            ok = True
        except subprocess.TimeoutExpired:
            ok = False
            kill_group(self.p)
            self.p.wait()
        took = time.monotonic() - t0
        self.finish()
        return ok, took, self.p.returncode

    def finish(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        with LOCK:
            DAEMONS.discard(self)

    def crash(self):
        rc = self.p.poll()
        r = Res(self.cmd, rc, False, 0, "", self.stderr())
        return crash_reason(r, sent=self.sent)


# --------------------------------------------------------------------------
# files, configs and state


def write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def read_regular(path, limit=256 << 20):
    """The bytes of a regular file (after following links); OSError for
    anything else. Never blocks on a FIFO, never reads a device."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file (mode {stat.S_IFMT(st.st_mode):o})")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{path} is larger than {limit} bytes")
        out = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            out.append(b)
        return b"".join(out)
    finally:
        os.close(fd)


def mkfifo(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    return path


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def rmtree(path):
    if path and os.path.lexists(path):
        # unmount anything still mounted below it first
        for m in reversed(list(MOUNTS)):
            if m == path or m.startswith(path.rstrip("/") + "/"):
                umount(m)
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            subprocess.run(["rm", "-rf", "--one-file-system", path], timeout=120)


def mount(args, mountpoint):
    os.makedirs(mountpoint, exist_ok=True)
    r = subprocess.run(["mount"] + args + [mountpoint], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"mount {args} {mountpoint}: {r.stderr.strip()}")
    with LOCK:
        MOUNTS.append(mountpoint)


def mount_tmpfs(mountpoint, size, ro=False):
    mount(["-t", "tmpfs", "-o", f"size={size},mode=0755" + (",ro" if ro else ""), "tmpfs"], mountpoint)


def remount(mountpoint, opts):
    r = subprocess.run(["mount", "-o", "remount," + opts, mountpoint], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"remount {opts} {mountpoint}: {r.stderr.strip()}")


def bind_ro(src, mountpoint):
    mount(["--bind", src], mountpoint)
    r = subprocess.run(["mount", "-o", "remount,bind,ro", mountpoint], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"remount ro {mountpoint}: {r.stderr.strip()}")


def umount(mountpoint):
    with LOCK:
        if mountpoint not in MOUNTS:
            return
        MOUNTS.remove(mountpoint)
    r = subprocess.run(["umount", mountpoint], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", mountpoint], capture_output=True, text=True, timeout=30)


def fill(dirpath):
    """Fill the filesystem of dirpath until ENOSPC."""
    i = 0
    while True:
        try:
            with open(os.path.join(dirpath, f".filler{i}"), "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            i += 1
            if i > 3:
                return


def sub(text, old, new, count=1):
    if old not in text:
        raise RuntimeError(f"examples changed: {old!r} not found")
    return text.replace(old, new, count)


WEB_IMAGE = "img-2026-11"


def make_config(dst, speed=None, fast_web=False, checkpoint_pause=None, image=None, latencies=False):
    """A copy of examples/ (the simulator demo: providers, policies, pools),
    optionally faster."""
    os.makedirs(dst, exist_ok=True)
    for name in (".poolwrightignore", "providers.yaml", "policies.yaml"):
        shutil.copy(os.path.join(EXAMPLES, name), os.path.join(dst, name))
    shutil.copytree(os.path.join(EXAMPLES, "pools"), os.path.join(dst, "pools"))
    prov = os.path.join(dst, "providers.yaml")
    text = read(prov).decode()
    if speed is not None or latencies:
        repl = f"speed: {speed or 20}"
        if latencies:
            repl += ("\n  bootTime: {fixed: 20s}\n  healthDelay: {fixed: 5s}"
                     "\n  drainTime: {fixed: 10s}\n  terminateTime: {fixed: 4s}")
        text = sub(text, "speed: 20", repl)
        write(prov, text)
    web = os.path.join(dst, "pools", "web.yaml")
    text = read(web).decode()
    if fast_web:
        text = re.sub(r"\n    checkpoints:\n      - \{at: \"50%\", pause: 30s\}", "", text)
        if "checkpoints" in text:
            raise RuntimeError("examples changed: web.yaml checkpoints")
        text = sub(text, "minReady: 10s", "minReady: 300ms")
    if checkpoint_pause:
        text = sub(text, "pause: 30s", f"pause: {checkpoint_pause}")
    if image:
        text = sub(text, f"image: {WEB_IMAGE}", f"image: {image}")
    write(web, text)
    return dst


def set_web_image(cfg, image):
    web = os.path.join(cfg, "pools", "web.yaml")
    text = read(web).decode()
    text2 = re.sub(r"(\n    image: )\S+", r"\g<1>" + image, text, count=1)
    if text2 == text and f"image: {image}" not in text:
        raise RuntimeError("cannot set web image")
    # atomic save, as an editor does
    tmp = web + ".tmp~"
    write(tmp, text2)
    os.rename(tmp, web)


def load_fleet(state, name="sim"):
    """(fleet dict or None, error)."""
    path = os.path.join(state, "sim", f"{name}.json")
    try:
        return json.loads(read_regular(path)), None
    except FileNotFoundError:
        return None, "absent"
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"


def fleet_summary(fleet, now=None):
    """pool -> (template hash, size, live node count, sorted live node ids)."""
    out = {}
    if not isinstance(fleet, dict):
        return out
    for name, p in (fleet.get("pools") or {}).items():
        live = [n["id"] for n in p.get("nodes", []) if not n.get("goneAt")]
        out[name] = (p.get("templateHash"), p.get("size"), len(live), tuple(sorted(live)))
    return out


SNAP_SKIP = {"lock", "daemon.json", "control.sock"}


def snapshot(root):
    """Path -> digest/type of everything under a state dir that is state
    (not the lock, the daemon file or the socket)."""
    snap = {}
    if not os.path.lexists(root):
        return {"": "absent"}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            if rel in SNAP_SKIP or n.startswith(".filler"):
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = "link:" + os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                if n.startswith("tmp") or ".tmp" in n:
                    continue
                if st.st_size > 64 << 20:
                    snap[rel] = f"big:{st.st_size}:{st.st_mtime_ns}"
                else:
                    try:
                        snap[rel] = hashlib.sha256(read(full)).hexdigest()[:16]
                    except OSError as e:
                        snap[rel] = f"unreadable:{e.errno}"
            else:
                snap[rel] = f"special:{stat.S_IFMT(st.st_mode)}"
    return snap


def snap_diff(a, b):
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            if k not in a:
                out.append(f"+{k}")
            elif k not in b:
                out.append(f"-{k}")
            else:
                out.append(f"~{k}")
    return out


def inventory_pools(state):
    """The pool names in STATE/inventory.json, or None when unreadable."""
    try:
        doc = json.loads(read_regular(os.path.join(state, "inventory.json")))
        return set((doc.get("pools") or {}).keys())
    except (OSError, ValueError, AttributeError):
        return None


def classify_change(state, before_fleet, before_inventory=None):
    """'loss' when pools or live nodes disappeared, the fleet no longer
    parses, or pools left the inventory; else 'unauth'."""
    after, err = load_fleet(state)
    if before_fleet is not None and after is None:
        return "loss", f"fleet no longer parses ({err})"
    b, a = fleet_summary(before_fleet), fleet_summary(after)
    lost = [p for p in b if p not in a]
    fewer = [p for p in b if p in a and a[p][2] < b[p][2]]
    if lost or fewer:
        return "loss", f"pools deleted {lost}, pools with fewer live nodes {fewer}"
    if before_inventory:
        inv = inventory_pools(state)
        if inv is None:
            return "loss", "the inventory no longer parses"
        gone = sorted(before_inventory - inv)
        if gone:
            return "loss", f"pools dropped from the inventory {gone}"
    return "unauth", ""


def outside_files(root, exclude):
    """Every path under root not under one of `exclude` (relative names)."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        top = rel.split(os.sep)[0]
        if top in exclude:
            dirnames[:] = []
            continue
        for n in dirnames + filenames:
            r = os.path.normpath(os.path.join(rel, n))
            if r.split(os.sep)[0] not in exclude:
                out.add(r)
    return out


# --------------------------------------------------------------------------
# raw HTTP


def build(method, path, headers=(), body=b"", host="DEFAULT", version="HTTP/1.1", close=True,
          port=None, content_length=True):
    if isinstance(path, str):
        path = path.encode()
    if isinstance(method, str):
        method = method.encode()
    lines = [method + b" " + path + b" " + version.encode()]
    if host == "DEFAULT":
        host = f"127.0.0.1:{port}"
    if host is not None:
        lines.append(b"Host: " + (host.encode() if isinstance(host, str) else host))
    names = set()
    for k, v in headers:
        k = k.encode() if isinstance(k, str) else k
        v = v.encode() if isinstance(v, str) else v
        names.add(k.lower())
        lines.append(k + b": " + v)
    if body and content_length and b"content-length" not in names and b"transfer-encoding" not in names:
        lines.append(b"Content-Length: %d" % len(body))
    if close and b"connection" not in names:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body if isinstance(body, bytes) else body.encode())


def parse_head(buf, final_only=True):
    """(status, headers dict, body start) of the first non-1xx response, or None
    (with final_only=False, an interim 1xx answer when no final one came)."""
    pos = 0
    interim = None
    while True:
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return None if final_only else interim
        head = buf[pos:end].decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/\d(?:\.\d)? (\d{3})", head[0])
        if not m:
            return (-1, {}, end + 4)
        status = int(m.group(1))
        hdrs = {}
        for h in head[1:]:
            if ":" in h:
                k, v = h.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            interim = (status, hdrs, end + 4)
            pos = end + 4
            continue
        return (status, hdrs, end + 4)


def complete(buf):
    h = parse_head(buf)
    if not h:
        return False
    status, hdrs, start = h
    if status == -1:
        return False
    body = buf[start:]
    if "content-length" in hdrs:
        try:
            return len(body) >= int(hdrs["content-length"])
        except ValueError:
            return False
    if "chunked" in hdrs.get("transfer-encoding", ""):
        return body.endswith(b"0\r\n\r\n")
    return status in (204, 304)


def http_exchange(target, data, timeout=10.0, read_cap=1 << 20, drip=None, stream=None):
    """Send `data` (or `drip`: bytes sent one per second; or `stream`: a
    generator of chunks) to target ('tcp', port) | ('unix', path) and read the
    answer until it is complete, the server closes, or `timeout`."""
    t0 = time.monotonic()
    res = {"status": None, "headers": {}, "body": b"", "error": None, "closed": False,
           "elapsed": 0.0, "sent": 0, "send_error": None}
    fam = socket.AF_INET if target[0] == "tcp" else socket.AF_UNIX
    s = socket.socket(fam, socket.SOCK_STREAM)
    buf = b""
    try:
        s.settimeout(min(timeout, 5))
        s.connect(("127.0.0.1", target[1]) if target[0] == "tcp" else target[1])
        deadline = t0 + timeout
        try:
            if data:
                s.sendall(data)
                res["sent"] += len(data)
            if drip:
                for i in range(len(drip)):
                    if time.monotonic() > deadline:
                        break
                    s.sendall(drip[i:i + 1])
                    res["sent"] += 1
                    # stop dripping as soon as the server answered or closed
                    r, _, _ = select.select([s], [], [], 1.0)
                    if r:
                        break
            if stream:
                for chunk in stream:
                    if time.monotonic() > deadline:
                        break
                    r, _, _ = select.select([s], [], [], 0)
                    if r:
                        break
                    s.sendall(chunk)
                    res["sent"] += len(chunk)
        except OSError as e:
            res["send_error"] = f"{type(e).__name__}: {e}"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                res["error"] = "timeout"
                break
            s.settimeout(remaining)
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                res["error"] = "timeout"
                break
            if not chunk:
                res["closed"] = True
                break
            buf += chunk
            if len(buf) > read_cap or complete(buf):
                break
    except socket.timeout:
        res["error"] = "timeout"
    except OSError as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        s.close()
    res["elapsed"] = time.monotonic() - t0
    h = parse_head(buf) or parse_head(buf, final_only=False)
    if h:
        res["status"], res["headers"], start = h
        res["body"] = buf[start:]
    elif buf:
        res["status"] = -1
        res["body"] = buf
    return res



def probe_health(port, deadline=5.0):
    """A fresh connection's GET /healthz, retried until 200 or `deadline`.
    (ok, seconds, last outcome)."""
    t0 = time.monotonic()
    last = None
    while True:
        left = deadline - (time.monotonic() - t0)
        if left <= 0:
            return False, time.monotonic() - t0, last
        r = http_exchange(("tcp", port), build("GET", "/healthz", port=port), timeout=max(0.2, left))
        if r["status"] == 200:
            return True, time.monotonic() - t0, "200"
        last = r["error"] or (f"status {r['status']}" if r["status"] else "closed without answer")
        time.sleep(0.1)


def describe_http(r):
    if r["status"] is None:
        return r["error"] or ("closed without answer" if r["closed"] else "no answer")
    if r["status"] == -1:
        return "non-HTTP answer " + short(r["body"], 80)
    return f"{r['status']} {short(r['body'], 160)}"


# --------------------------------------------------------------------------
# 1. yaml-suite

YAML_LEVEL = ("not valid YAML", "cannot separate the documents", "document exceeds the parser",
              "file is not valid UTF-8", "duplicate key", "more than ")


def cat_yaml_suite(args):
    cat = Category("yaml-suite")
    path = args.yaml_suite
    if not os.path.isabs(path):
        path = os.path.join(ROOT, path)
    if not os.path.exists(path):
        cat.note(f"{path} absent: skipped")
        return cat
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    base = tempfile.mkdtemp(prefix="yaml-suite-", dir=TMP_ROOT)
    results = {}

    def one(i, case):
        d = os.path.join(base, f"{i:04d}")
        os.makedirs(d)
        p = os.path.join(d, "case.yaml")
        write(p, case["yaml"].encode("utf-8", "surrogatepass"))
        r = run(["validate", p], timeout=20)
        shutil.rmtree(d, ignore_errors=True)
        return case, r

    try:
        with ThreadPool(3) as pool:
            for case, r in pool.map(lambda a: one(*a), list(enumerate(cases))):
                results[case["id"]] = (case, r)
    finally:
        rmtree(base)
    cat.cases = len(results)
    fail_total = fail_rejected = fail_located = 0
    accepted, schema_only, unlocated, odd_rc = [], [], [], []
    false_reject = []
    for cid, (case, r) in sorted(results.items()):
        check(cat, cid, f"validate case.yaml  # {case['name']}", r)
        errs = [re.sub(r"^.*?error: ", "", l) for l in r.stderr.splitlines() if ": error: " in l]
        yaml_level = any(e.startswith(YAML_LEVEL) for e in errs)
        if r.rc not in (0, 1) and not r.timed_out:
            odd_rc.append(f"{cid}:{r.rc}")
        if case["fail"]:
            fail_total += 1
            if r.rc == 0:
                accepted.append(cid)
            elif r.rc is not None and r.rc > 0:
                fail_rejected += 1
                if re.search(r"case\.yaml:\d+:\d+:", r.stderr):
                    fail_located += 1
                else:
                    unlocated.append(cid)
                if not yaml_level:
                    schema_only.append(f"{cid} ({short(errs[0] if errs else r.stderr, 70)})")
        elif yaml_level:
            false_reject.append(f"{cid} ({short(errs[0], 60)})")
    cat.note(f"{fail_total} fail=true cases: {fail_rejected} rejected, {fail_located} with a located "
             f"error (case.yaml:LINE:COL:)")
    cat.note(f"fail=true ACCEPTED (exit 0): {len(accepted)}" + (f": {', '.join(accepted)}" if accepted else ""))
    cat.note(f"fail=true rejected only by the schema (the YAML parser accepted invalid YAML): "
             f"{len(schema_only)}" + (f": {'; '.join(schema_only)}" if schema_only else ""))
    if unlocated:
        cat.note(f"fail=true rejected without FILE:LINE:COL: {', '.join(unlocated)}")
    cat.note(f"valid YAML refused at the YAML level (not a schema error): {len(false_reject)}"
             + (f": {'; '.join(false_reject)}" if false_reject else ""))
    if odd_rc:
        cat.note(f"unexpected exit codes: {', '.join(odd_rc)}")
    cat.yaml_accepted = accepted
    return cat


class ThreadPool:
    """A minimal pool (concurrent.futures without its atexit join)."""

    def __init__(self, n):
        import concurrent.futures
        self.ex = concurrent.futures.ThreadPoolExecutor(n)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.ex.shutdown(wait=True, cancel_futures=True)

    def map(self, fn, items):
        return self.ex.map(fn, items)


# --------------------------------------------------------------------------
# 2. adversarial-files


def pool_doc(name="hostile", size="1", image="img-1", surge="1", unavail="0", provider="sim",
             extra="", template_extra="", meta_extra=""):
    return (f"apiVersion: poolwright/v1\nkind: NodePool\nmetadata:\n  name: {name}\n{meta_extra}"
            f"spec:\n  providerRef: {provider}\n  size: {size}\n  template:\n    image: {image}\n"
            f"{template_extra}  rollout:\n    maxSurge: {surge}\n    maxUnavailable: {unavail}\n{extra}")


def sim2_doc(extra):
    return f"apiVersion: poolwright/v1\nkind: Provider\nmetadata:\n  name: sim2\nspec:\n  type: sim\n{extra}"


def with_sim2(extra):
    return sim2_doc(extra) + "---\n" + pool_doc(provider="sim2")


def policy_doc(spec):
    return f"apiVersion: poolwright/v1\nkind: DisruptionPolicy\nmetadata:\n  name: hostile-policy\nspec:\n{spec}"


def pool_disruption(lines):
    return pool_doc(extra="  disruption:\n" + lines)


def http_doc(extra, url="https://127.0.0.1:1"):
    return (f"apiVersion: poolwright/v1\nkind: Provider\nmetadata:\n  name: plug\nspec:\n  type: http\n"
            f"  url: {url}\n  timeout: 2s\n  maxAttempts: 1\n{extra}---\n" + pool_doc(name="plugged", provider="plug"))


def cluster_doc(kubeconfig):
    return (f"apiVersion: poolwright/v1\nkind: Cluster\nmetadata:\n  name: hostile-cluster\nspec:\n"
            f"  kubeconfig: {kubeconfig}\n  nodeMatch: {{by: providerID}}\n---\n"
            + pool_doc(name="clustered", extra="", template_extra="").replace(
                "  providerRef: sim\n", "  providerRef: sim\n  clusterRef: hostile-cluster\n"))


def kubeconfig(ca=None, cert=None, key=None, token_file=None):
    user = {}
    if cert:
        user["client-certificate"] = cert
    if key:
        user["client-key"] = key
    if token_file:
        user["tokenFile"] = token_file
    cluster = {"server": "https://127.0.0.1:1"}
    if ca:
        cluster["certificate-authority"] = ca
    return json.dumps({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "c", "cluster": cluster}],
                       "users": [{"name": "u", "user": user}],
                       "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                       "current-context": "x"})


def billion_laughs(levels=9, width=9):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for i in range(1, levels):
        name = chr(ord("a") + i)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    return "\n".join(lines) + "\n"


def adversarial_cases():
    """(name, setup(cfg, aux) -> optional target path | dict) list."""
    C = []

    def case(name, **kw):
        def deco(fn):
            C.append((name, fn, kw))
            return fn
        return deco

    def add(name, data, fname="x.yaml", **kw):
        def fn(cfg, aux):
            write(os.path.join(cfg, fname), data(aux) if callable(data) else data)
        C.append((name, fn, kw))

    def link(name, target, fname="x.yaml", **kw):
        def fn(cfg, aux):
            t = target(aux) if callable(target) else target
            os.symlink(t, os.path.join(cfg, fname))
        C.append((name, fn, kw))

    # --- file types and links -------------------------------------------
    link("symlink->fifo", lambda aux: mkfifo(os.path.join(aux, "fifo")))
    link("symlink->/dev/zero", "/dev/zero")
    link("symlink->/dev/urandom", "/dev/urandom")
    link("symlink->/dev/random", "/dev/random")
    link("symlink->/dev/null", "/dev/null")
    link("symlink->/dev/full", "/dev/full")
    link("symlink->/dev/tty", "/dev/tty")
    link("symlink->/proc/self/status", "/proc/self/status")
    link("symlink->/proc/self/fd/0 (an open pipe)", "/proc/self/fd/0", stdin_pipe=True)

    def to_dir(aux):
        d = os.path.join(aux, "d")
        write(os.path.join(d, "inner.yaml"), "a: b\n")
        return d
    link("symlink->directory", to_dir)
    link("symlink->itself", lambda aux: "x.yaml")

    @case("symlink loop a->b->a")
    def _(cfg, aux):
        os.symlink("b.yaml", os.path.join(cfg, "a.yaml"))
        os.symlink("a.yaml", os.path.join(cfg, "b.yaml"))

    @case("symlink chain of 60")
    def _(cfg, aux):
        write(os.path.join(aux, "end.yaml"), "a: b\n")
        prev = os.path.join(aux, "end.yaml")
        for i in range(60):
            p = os.path.join(aux, f"l{i}")
            os.symlink(prev, p)
            prev = p
        os.symlink(prev, os.path.join(cfg, "x.yaml"))

    link("symlink->nonexistent", "/nonexistent/poolwright/x.yaml")
    link("symlink->/etc/shadow", "/etc/shadow")

    @case("directory named x.yaml")
    def _(cfg, aux):
        os.mkdir(os.path.join(cfg, "x.yaml"))

    @case("directory named x.yaml holding y.yaml")
    def _(cfg, aux):
        write(os.path.join(cfg, "x.yaml", "y.yaml"), "a: b\n")

    @case("FIFO named x.yaml")
    def _(cfg, aux):
        mkfifo(os.path.join(cfg, "x.yaml"))

    @case("FIFO named pools/x.yml")
    def _(cfg, aux):
        mkfifo(os.path.join(cfg, "pools", "x.yml"))

    @case("FIFO replaces pools/web.yaml")
    def _(cfg, aux):
        os.unlink(os.path.join(cfg, "pools", "web.yaml"))
        mkfifo(os.path.join(cfg, "pools", "web.yaml"))

    def replace_cache(kind):
        def fn(cfg, aux):
            p = os.path.join(cfg, "pools", "cache.yaml")
            os.unlink(p)
            if kind == "FIFO":
                os.mkfifo(p)
            elif kind == "directory":
                os.mkdir(p)
            else:
                s = socket.socket(socket.AF_UNIX)
                s.bind(p)
                s.close()
        C.append((f"{kind} replaces pools/cache.yaml", fn, {"loss_if_pruned": True}))
    for kind in ("FIFO", "directory", "Unix socket"):
        replace_cache(kind)

    @case("pools/ is a symlink to an identical directory", loss_if_pruned=True)
    def _(cfg, aux):
        shutil.move(os.path.join(cfg, "pools"), os.path.join(aux, "pools"))
        os.symlink(os.path.join(aux, "pools"), os.path.join(cfg, "pools"))

    @case("Unix socket named x.yaml")
    def _(cfg, aux):
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(cfg, "x.yaml"))
        s.close()

    @case("unreadable file chmod 000 (root: still readable)")
    def _(cfg, aux):
        p = os.path.join(cfg, "x.yaml")
        write(p, "a: b\n")
        os.chmod(p, 0)

    @case("unreadable pools/ dir chmod 000 (root)")
    def _(cfg, aux):
        os.chmod(os.path.join(cfg, "pools"), 0)

    link("symlink loop.yaml->. (directory)", lambda aux: ".", fname="loop.yaml")
    link("symlink dir loop->. (not yaml)", lambda aux: ".", fname="loop")

    @case("pools/ replaced by symlink->/dev/zero", loss_if_pruned=True)
    def _(cfg, aux):
        shutil.rmtree(os.path.join(cfg, "pools"))
        os.symlink("/dev/zero", os.path.join(cfg, "pools"))

    @case("target is a FIFO")
    def _(cfg, aux):
        return mkfifo(os.path.join(aux, "target-fifo"))

    @case("target is /dev/zero")
    def _(cfg, aux):
        return "/dev/zero"

    @case("target is a symlink to itself")
    def _(cfg, aux):
        p = os.path.join(aux, "self")
        os.symlink(p, p)
        return p

    @case("target does not exist")
    def _(cfg, aux):
        return os.path.join(aux, "nope")

    @case("target is a .yaml symlink -> FIFO")
    def _(cfg, aux):
        f = mkfifo(os.path.join(aux, "f"))
        p = os.path.join(aux, "t.yaml")
        os.symlink(f, p)
        return p

    @case("target is a Unix socket")
    def _(cfg, aux):
        p = os.path.join(aux, "sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(p)
        s.close()
        return p

    add("255-byte file name", "a: [\n", fname="n" * 250 + ".yaml")
    add("ANSI escapes in file name", "a: [\n", fname="\x1b[2J\x1b[31mevil.yaml")
    add("newline in file name", "a: [\n", fname="a\nb.yaml")

    @case("non-UTF-8 file name")
    def _(cfg, aux):
        with open(os.path.join(cfg.encode(), b"\xff\xfe.yaml"), "wb") as f:
            f.write(b"a: [\n")

    @case("200 nested directories")
    def _(cfg, aux):
        d = cfg
        for i in range(200):
            d = os.path.join(d, "d")
        write(os.path.join(d, "x.yaml"), "a: [\n")

    @case("path longer than PATH_MAX")
    def _(cfg, aux):
        fd = os.open(cfg, os.O_RDONLY)
        try:
            for i in range(40):
                name = "p" * 200
                os.mkdir(name, dir_fd=fd)
                nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = nfd
            wfd = os.open("x.yaml", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(wfd, b"a: [\n")
            os.close(wfd)
        finally:
            os.close(fd)

    @case("10,000 small files")
    def _(cfg, aux):
        d = os.path.join(cfg, "many")
        os.makedirs(d)
        for i in range(10000):
            with open(os.path.join(d, f"f{i:05d}.yaml"), "w") as f:
                f.write("a: b\n")

    add("hidden .x.yaml with garbage (ignored)", "\0\0\0[[[", fname=".x.yaml")
    add("editor leftovers with garbage (ignored)", "\0[[[", fname="x.yaml~")
    add("X.YAML upper case (not loaded)", "\0[[[", fname="X.YAML")

    @case("hard link to /etc/passwd named passwd.yaml")
    def _(cfg, aux):
        try:
            os.link("/etc/passwd", os.path.join(cfg, "passwd.yaml"))
        except OSError:
            shutil.copy("/etc/passwd", os.path.join(cfg, "passwd.yaml"))

    # --- .poolwrightignore ------------------------------------------------
    @case(".poolwrightignore is a FIFO")
    def _(cfg, aux):
        os.unlink(os.path.join(cfg, ".poolwrightignore"))
        mkfifo(os.path.join(cfg, ".poolwrightignore"))

    @case(".poolwrightignore symlink->FIFO")
    def _(cfg, aux):
        os.unlink(os.path.join(cfg, ".poolwrightignore"))
        os.symlink(mkfifo(os.path.join(aux, "fifo")), os.path.join(cfg, ".poolwrightignore"))

    for dev in ("/dev/zero", "/dev/urandom"):
        def fn(cfg, aux, dev=dev):
            os.unlink(os.path.join(cfg, ".poolwrightignore"))
            os.symlink(dev, os.path.join(cfg, ".poolwrightignore"))
        C.append((f".poolwrightignore symlink->{dev}", fn, {}))

    @case(".poolwrightignore is a directory")
    def _(cfg, aux):
        os.unlink(os.path.join(cfg, ".poolwrightignore"))
        os.mkdir(os.path.join(cfg, ".poolwrightignore"))

    @case(".poolwrightignore 100 MiB sparse")
    def _(cfg, aux):
        sparse(os.path.join(cfg, ".poolwrightignore"), 100 << 20)

    add(".poolwrightignore invalid UTF-8", b"\xff\xfe\xc0\xaf\npools/\xff\n", fname=".poolwrightignore")
    add(".poolwrightignore pathological glob", "**/" * 5000 + "x\n" + "[" * 5000 + "\n" + "{a," * 3000 + "\n",
        fname=".poolwrightignore")
    add(".poolwrightignore 20,000 patterns", "".join(f"pat{i}/**/*.y?ml\n" for i in range(20000)),
        fname=".poolwrightignore")
    add(".poolwrightignore ignores providers.yaml", "providers.yaml\n", fname=".poolwrightignore")
    add(".poolwrightignore ignores everything", "*\n", fname=".poolwrightignore")

    @case("pools/.poolwrightignore is a FIFO")
    def _(cfg, aux):
        mkfifo(os.path.join(cfg, "pools", ".poolwrightignore"))

    # --- structure and parser limits ------------------------------------
    add("deep flow [[[ x100k", "[" * 100000)
    add("deep flow {a: x100k", "{a: " * 100000)
    add("deep flow [[[ x100k closed", "[" * 100000 + "]" * 100000)
    add("deep block sequence - - - x10k", "- " * 10000 + "x\n")
    add("deep block mappings 700 levels", "".join("  " * i + "a:\n" for i in range(700)) + "  " * 700 + "b\n")
    add("deep mixed [{ x50k", "[{a: " * 50000)
    add("nesting 70 inside template.plugin",
        pool_doc(template_extra="    plugin:\n      deep: " + "[" * 70 + "1" + "]" * 70 + "\n"))
    add("nesting 40 inside template.plugin",
        pool_doc(template_extra="    plugin:\n      deep: " + "[" * 40 + "1" + "]" * 40 + "\n"))
    add("billion laughs (9x9)", billion_laughs())
    add("billion laughs in metadata.labels",
        pool_doc(meta_extra="  labels:\n    x: &x lol\n") + "# tail\n" + billion_laughs())
    add("billion laughs inside a NodePool's plugin field",
        pool_doc(template_extra="    plugin:\n" + "".join("      " + l + "\n" for l in billion_laughs().splitlines())))
    add("10k aliases of one anchor", "a: &a x\nb: [" + ",".join(["*a"] * 10000) + "]\n")
    add("quadratic blow-up: 100 KB anchor x1000", "a: &a " + "x" * 100000 + "\nb: [" + ",".join(["*a"] * 1000) + "]\n")
    add("self-referencing alias", "a: &a [*a]\n")
    add("undefined alias", pool_doc(size="*nope"))
    add("alias as a key", "&k apiVersion: poolwright/v1\n*k : x\n")
    add("merge key chain", "a: &a {x: 1}\nb: &b {<<: *a}\nc: {<<: [*a, *b, *a]}\n")
    add("100k-character anchor name", "a: &" + "n" * 100000 + " x\n")

    base_pool = pool_doc()
    add("invalid UTF-8 at start", b"\xff" + base_pool.encode())
    add("invalid UTF-8 in a value", base_pool.replace("img-1", "img-\udcff").encode("utf-8", "surrogateescape"))
    add("overlong UTF-8 C0 AF", base_pool.encode().replace(b"img-1", b"img-\xc0\xaf"))
    add("UTF-8 encoded surrogate ED A0 80", base_pool.encode().replace(b"img-1", b"img-\xed\xa0\x80"))
    add("UTF-16LE with BOM", b"\xff\xfe" + base_pool.encode("utf-16-le"))
    add("UTF-16BE with BOM", b"\xfe\xff" + base_pool.encode("utf-16-be"))
    add("UTF-32LE with BOM", b"\xff\xfe\x00\x00" + base_pool.encode("utf-32-le"))
    add("NUL in a value", base_pool.replace("img-1", "img\x00-1"))
    add("NUL at the start", "\x00" + base_pool)
    add("1000 NUL bytes", b"\x00" * 1000)
    add("UTF-8 BOM + valid pool", "\ufeff" + base_pool)
    add("BOM at start of 2nd document", base_pool + "---\n\ufeff" + pool_doc(name="hostile2"))
    add("double BOM", "\ufeff\ufeff" + base_pool)
    add("CRLF line endings", base_pool.replace("\n", "\r\n"))
    add("CR-only line endings", base_pool.replace("\n", "\r"))
    add("mixed line endings", base_pool.replace("\n", "\r\n", 3))
    add("10,000 documents", "".join(f"---\na{i}: 1\n" for i in range(10000)))
    add("1001 documents", "".join(pool_doc(name=f"h{i}") + "---\n" for i in range(1001)))
    add("10,000 empty documents", "---\n" * 10000)
    add("10,000 document end markers", "...\n" * 10000)
    add("1 MB single comment line", "# " + "a" * 999990 + "\n" + base_pool)
    add("1 MB single-line label value", pool_doc(meta_extra="  labels: {x: \"" + "v" * 999000 + "\"}\n"))
    add("50k-entry flow mapping on one line",
        pool_doc(meta_extra="  labels: {" + ", ".join(f"k{i}: v" for i in range(50000)) + "}\n"))
    add("exactly 1 MiB file", lambda aux: (base_pool + "#" * (1048576 - len(base_pool) - 1) + "\n"))
    add("1 MiB + 1 byte file", lambda aux: (base_pool + "#" * (1048577 - len(base_pool) - 1) + "\n"))

    @case("2 MiB file")
    def _(cfg, aux):
        write(os.path.join(cfg, "x.yaml"), base_pool + "#" * (2 << 20) + "\n")

    @case("100 MiB sparse file")
    def _(cfg, aux):
        sparse(os.path.join(cfg, "x.yaml"), 100 << 20)

    @case("100 MiB sparse file, validate --max-file-size 200000000", validate_args=["--max-file-size", "200000000"])
    def _(cfg, aux):
        sparse(os.path.join(cfg, "x.yaml"), 100 << 20)

    add("tab indentation", base_pool.replace("  ", "\t"))
    add("%YAML 1.1 directive", "%YAML 1.1\n---\n" + base_pool)
    add("%YAML 9.9 directive", "%YAML 9.9\n---\n" + base_pool)
    add("%TAG directive and custom tag", "%TAG ! tag:evil.example,2000:\n---\n!foo\n" + base_pool)
    add("!!binary image", base_pool.replace("image: img-1", "image: !!binary aW1nLTE="))
    add("!!python/object/apply tag",
        lambda aux: base_pool.replace("image: img-1",
                                      f"image: !!python/object/apply:os.system [\"touch {aux}/pwned\"]"),
        check_absent="pwned")
    add("!!set and !!omap", "a: !!set {x, y}\nb: !!omap [x: 1]\n")
    add("complex key in labels", pool_doc(meta_extra="  labels:\n    ? [a, b]\n    : c\n"))
    add("null key in labels", pool_doc(meta_extra="  labels:\n    ~: c\n"))
    add("duplicate key size", base_pool.replace("  size: 1\n", "  size: 1\n  size: 2\n"))
    add("duplicate pool names across files", pool_doc(name="web"))
    add("lone surrogate escape \\uD800", base_pool.replace("image: img-1", 'image: "img-\\uD800"'))
    add("out-of-range escape \\U00110000", base_pool.replace("image: img-1", 'image: "img-\\U00110000"'))
    add("NUL escape \\0 in kind", base_pool.replace("kind: NodePool", 'kind: "NodePool\\0"'))
    add("10,000-digit integer", pool_doc(size="1" + "0" * 10000))
    for v in ("1e309", ".inf", ".nan", "-0", "0x10", "0o10", "1_000", "+1", "1.5", "true", "~", "[]", "{}"):
        add(f"size: {v}", pool_doc(size=v))
    add("block scalar indentation indicator |9", base_pool.replace("image: img-1", "image: |9\n  img-1"))
    add("10,000 labels", pool_doc(template_extra="    labels:\n" + "".join(f"      k{i}: v\n" for i in range(10000))))
    add("64 KiB label value", pool_doc(template_extra="    labels: {k: \"" + "v" * 65536 + "\"}\n"))
    add("10,000-character pool name", pool_doc(name="a" * 10000))
    add("pool name ../../etc/passwd", pool_doc(name='"../../etc/passwd"'))
    add("pool name with unicode", pool_doc(name="wéb"))
    add("apiVersion poolwright/v2", base_pool.replace("poolwright/v1", "poolwright/v2"))

    @case("500 valid pool files", apply_timeout=90)
    def _(cfg, aux):
        for i in range(500):
            write(os.path.join(cfg, "many", f"p{i:03d}.yaml"), pool_doc(name=f"many-{i:03d}"))

    # --- huge and odd values ----------------------------------------------
    for v in ("4294967295", "4294967296", "100000000", "-1", '"2"', "100001", "100000", "0"):
        add(f"size: {v}", pool_doc(size=v))
    for v in ("9223372036854775807", '"9223372036854775807%"', '"1000%"', '"1001%"',
              "18446744073709551616", '"-1%"', '"1e3%"', '"50.5%"'):
        add(f"maxSurge: {v}", pool_doc(surge=v))
    add("maxUnavailable: \"100%\" with maxSurge 0", pool_doc(surge="0", unavail='"100%"'))
    add("maxUnavailable: 9223372036854775807", pool_doc(surge="0", unavail="9223372036854775807"))
    for v in ("9999999999h", "720h1ns", "-5s", "1e10s", "P1D", "5s5s", "0s", "18446744073709551615s"):
        add(f"startupTimeout: {v}", pool_doc().replace(
            "    maxUnavailable: 0\n", f"    maxUnavailable: 0\n    health: {{startupTimeout: \"{v}\"}}\n"))
    add("progressDeadline 9999999999999999999h", pool_doc().replace(
        "    maxUnavailable: 0\n", "    maxUnavailable: 0\n    progressDeadline: 9999999999999999999h\n"))
    for v in ("9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z", "2026-02-30T00:00:00Z",
              "2016-12-31T23:59:60Z", "+999999-01-01T00:00:00Z", "9999-12-31T23:59:59+14:00"):
        add(f"until: {v}", pool_disruption(f"    policy: Block\n    until: \"{v}\"\n"))
    add("DisruptionPolicy until 9999-12-31T23:59:59Z",
        policy_doc("  policy: Block\n  until: \"9999-12-31T23:59:59Z\"\n") + "---\n"
        + pool_disruption("    policyRef: hostile-policy\n"))
    for tz in ("../../../../etc/passwd", "/etc/localtime", "Europe/Berlin\\0", "x" * 10000, "posix/../../../../proc/self/environ"):
        add(f"timezone {tz[:40]}", pool_disruption(
            f"    policy: AllowDuringMaintenanceWindow\n    windows:\n      - {{start: \"02:00\", duration: 1h, timezone: \"{tz}\"}}\n"))
    for cron in ("*/0 * * * *", "0-4294967295 * * * *", "* * * * * * * *", "0 0 30 2 *", "0 0 31 4 *",
                 "59 23 31 12 7", "0 0 29 2 1"):
        add(f"cron {cron}", pool_disruption(
            f"    policy: AllowDuringMaintenanceWindow\n    windows:\n      - {{cron: \"{cron}\", duration: 1h, timezone: UTC}}\n"))
    add("10,000 windows", pool_disruption("    policy: AllowDuringMaintenanceWindow\n    windows:\n" + "".join(
        f"      - {{start: \"{i % 24:02d}:{i % 60:02d}\", duration: 1m, timezone: UTC}}\n" for i in range(10000))))
    for start, dur in (("24:00", "1h"), ("23:59:60", "1h"), ("02:00", "0s"), ("02:00", "9999h")):
        add(f"window start {start} duration {dur}", pool_disruption(
            f"    policy: AllowDuringMaintenanceWindow\n    windows:\n      - {{start: \"{start}\", duration: {dur}, timezone: UTC}}\n"))
    add("window days []", pool_disruption(
        "    policy: AllowDuringMaintenanceWindow\n    windows:\n      - {days: [], start: \"02:00\", duration: 1h, timezone: UTC}\n"))
    add("10,000 checkpoints", pool_doc().replace("    maxUnavailable: 0\n", "    maxUnavailable: 0\n    checkpoints:\n" + "".join(
        f"      - {{at: \"{(i % 100) + 1}%\", pause: 1s}}\n" for i in range(10000))))
    add("checkpoint 100% pause 720h", pool_doc().replace(
        "    maxUnavailable: 0\n", "    maxUnavailable: 0\n    checkpoints: [{at: \"100%\", pause: 720h}]\n"))
    for v in ("9223372036854775807", "0", "-1"):
        add(f"maxFailedNodes: {v}", pool_doc().replace("    maxUnavailable: 0\n", f"    maxUnavailable: 0\n    maxFailedNodes: {v}\n"))
    add("autoscaling min 0 max 4294967295", pool_doc().replace("  size: 1\n", "  autoscaling: {min: 0, max: 4294967295}\n"))
    add("autoscaling min 100000 max 100000", pool_doc().replace("  size: 1\n", "  size: 100000\n  autoscaling: {min: 100000, max: 100000}\n"))
    for v in ("0", "-1", "1e-300", "1e308", ".nan", ".inf", "-.inf"):
        add(f"sim speed: {v}", with_sim2(f"  speed: {v}\n"))
    for v in ("18446744073709551615", "-1", "18446744073709551616"):
        add(f"sim seed: {v}", with_sim2(f"  seed: {v}\n"))
    for v in ("0", "4294967295", "10000001"):
        add(f"sim quota: {v}", with_sim2(f"  quota: {v}\n"))
    for v in ("2.0", "-0.5", ".nan", ".inf"):
        add(f"sim failures.neverHealthy: {v}", with_sim2(f"  failures: {{neverHealthy: {v}}}\n"))
    add("sim bootTime lognormal sigma 1e308",
        with_sim2("  bootTime: {lognormal: {median: 720h, sigma: 1e308}}\n"))
    add("sim bootTime uniform min>max", with_sim2("  bootTime: {uniform: {min: 10s, max: 1s}}\n"))
    add("sim all latencies 0s + speed 1e308", with_sim2(
        "  speed: 1e308\n  bootTime: {fixed: 0s}\n  healthDelay: {fixed: 0s}\n  drainTime: {fixed: 0s}\n  terminateTime: {fixed: 0s}\n"))

    # --- files named by documents ---------------------------------------
    add("Cluster kubeconfig -> FIFO", lambda aux: cluster_doc(mkfifo(os.path.join(aux, "kfifo"))))
    add("Cluster kubeconfig -> /dev/zero", cluster_doc("/dev/zero"))
    add("Cluster kubeconfig -> /dev/urandom", cluster_doc("/dev/urandom"))
    add("Cluster kubeconfig -> directory", lambda aux: cluster_doc(aux))
    add("Cluster kubeconfig 100 MiB sparse", lambda aux: cluster_doc(sparse(os.path.join(aux, "kc"), 100 << 20)))

    def kc_named(aux, **kw):
        p = os.path.join(aux, "kubeconfig")
        write(p, kubeconfig(**kw))
        return cluster_doc(p)
    add("kubeconfig client-certificate/key -> FIFO",
        lambda aux: kc_named(aux, cert=mkfifo(os.path.join(aux, "cf")), key=os.path.join(aux, "cf")))
    add("kubeconfig certificate-authority -> /dev/zero", lambda aux: kc_named(aux, ca="/dev/zero"))
    add("kubeconfig tokenFile -> /dev/urandom", lambda aux: kc_named(aux, token_file="/dev/urandom"))
    add("http tokenFile -> FIFO", lambda aux: http_doc(f"  tokenFile: {mkfifo(os.path.join(aux, 'tf'))}\n"))
    add("http tokenFile -> /dev/zero", http_doc("  tokenFile: /dev/zero\n"))
    add("http tokenFile -> directory", lambda aux: http_doc(f"  tokenFile: {aux}\n"))
    add("http caFile -> FIFO", lambda aux: http_doc(f"  caFile: {mkfifo(os.path.join(aux, 'ca'))}\n"))
    add("http caFile -> /dev/urandom", http_doc("  caFile: /dev/urandom\n"))
    add("http clientCert/clientKey -> FIFO", lambda aux: http_doc(
        f"  clientCert: {mkfifo(os.path.join(aux, 'cc'))}\n  clientKey: {os.path.join(aux, 'cc')}\n"))
    add("http url with NUL", http_doc("", url='"http://127.0.0.1:1/\\0"'))
    add("http url port 99999", http_doc("", url="http://127.0.0.1:99999"))
    add("http 10,000 headers", http_doc("  headers:\n" + "".join(f"    X-H{i}: v\n" for i in range(10000)),
                                        url="http://127.0.0.1:1"))
    add("http header CRLF injection", http_doc('  headers: {X-A: "a\\r\\nHost: evil.example"}\n',
                                               url="http://127.0.0.1:1"))
    names = [c[0] for c in C]
    dups = [n for n, k in collections.Counter(names).items() if k > 1]
    assert not dups, f"duplicate case names {dups}"
    return C


def cat_adversarial(args):
    cat = Category("adversarial-files")
    base = tempfile.mkdtemp(prefix="adversarial-", dir=TMP_ROOT)
    try:
        base_cfg = make_config(os.path.join(base, "config"))
        base_state = os.path.join(base, "state")
        r = run(["apply", base_cfg, "--state-dir", base_state, "--auto-approve"], timeout=60)
        if r.rc != 0:
            cat.fail("control", "base apply", "apply examples", r.describe() + " " + short(r.stderr))
            return cat
        cases = adversarial_cases()
        if args.case:
            cases = [c for c in cases if args.case in c[0]]
        cat.cases = len(cases)
        stats = collections.Counter()
        verdicts = {}

        def one(item):
            i, (name, setup, kw) = item
            d = os.path.join(base, f"case{i:03d}")
            cfg, aux, state = os.path.join(d, "config"), os.path.join(d, "aux"), os.path.join(d, "state")
            stdin_r = stdin_w = None
            try:
                os.makedirs(aux)
                shutil.copytree(base_cfg, cfg, symlinks=True)
                shutil.copytree(base_state, state, symlinks=True)
                target = setup(cfg, aux) or cfg
                if kw.get("stdin_pipe"):
                    stdin_r, stdin_w = os.pipe()
                before = snapshot(state)
                before_fleet, _ = load_fleet(state)
                before_inv = inventory_pools(state)
                rv = run(["validate", target] + kw.get("validate_args", []), timeout=20, stdin=stdin_r)
                check(cat, name, f"poolwright validate {target}", rv)
                rp = run(["plan", target, "--state-dir", state], timeout=20, stdin=stdin_r)
                check(cat, name, f"poolwright plan {target} --state-dir S", rp)
                after_plan = snapshot(state)
                diff = snap_diff(before, after_plan)
                if diff:
                    kind, why = classify_change(state, before_fleet, before_inv)
                    cat.fail(kind, name, "poolwright plan DIR --state-dir S",
                             f"plan changed the state: {diff} {why}")
                ra = run(["apply", target, "--state-dir", state, "--auto-approve", "--prune"],
                         timeout=kw.get("apply_timeout", 20), stdin=stdin_r)
                if kw.get("apply_timeout"):
                    cat.note(f"{name}: apply took {ra.elapsed:.1f}s ({ra.describe()}; deadline {kw['apply_timeout']}s)")
                check(cat, name, f"poolwright apply {target} --state-dir S --auto-approve --prune", ra)
                after = snapshot(state)
                diff = snap_diff(after_plan, after)
                rejected = rv.rc != 0
                if not rejected and diff:
                    kind, why = classify_change(state, before_fleet, before_inv)
                    if kind == "loss" and kw.get("loss_if_pruned"):
                        cat.fail("loss", name, "poolwright apply DIR --state-dir S --auto-approve --prune",
                                 f"validate accepted the directory ({short(rv.stdout, 120)}): the non-regular/"
                                 f"symlinked entry was skipped without an error, so its pools left the desired "
                                 f"state, and apply --prune deleted them: {why}")
                    elif kind == "loss":
                        cat.note(f"{name}: accepted as valid, and apply --prune then removed pools/nodes: {why}")
                if not rejected and kw.get("loss_if_pruned"):
                    with LOCK:
                        stats["non-regular YAML entry skipped silently"] += 1
                if rejected and diff:
                    kind, why = classify_change(state, before_fleet, before_inv)
                    cat.fail(kind, name, "poolwright apply DIR --state-dir S --auto-approve --prune",
                             f"validate rejected the desired state ({rv.describe()}) but apply "
                             f"({ra.describe()}) changed {diff} {why}")
                after_fleet, err = load_fleet(state)
                if after_fleet is None:
                    cat.fail("loss", name, "apply", f"fleet file no longer parses: {err}")
                absent = kw.get("check_absent")
                if absent and os.path.lexists(os.path.join(aux, absent)):
                    cat.fail("unauth", name, "validate/plan/apply", f"{absent} was created")
                v = "rejected" if rejected else ("accepted" if rv.rc == 0 else "?")
                located = bool(re.search(r":\d+:\d+: error:", rv.stderr))
                verdicts[name] = (v, rv.rc, rp.rc, ra.rc, bool(diff), located,
                                  short(rv.stderr.splitlines()[0] if rv.stderr.strip() else rv.stdout, 120))
                with LOCK:
                    stats[v] += 1
                    if rejected and not located and not rv.timed_out:
                        stats["rejected without FILE:LINE:COL"] += 1
                    if rejected and ra.rc == 0:
                        stats["apply exit 0 on a rejected state"] += 1
                    if not rejected and diff:
                        stats["accepted and applied"] += 1
                    if "\x1b" in rv.stderr:
                        stats["diagnostics with raw ESC bytes from a file name"] += 1
                    if "root:x:0:0" in rv.stderr + rp.stderr + ra.stderr:
                        stats["/etc/passwd content echoed"] += 1
                if VERBOSE:
                    log(f"  {name}: {verdicts[name]}")
            except Exception as e:  # a setup problem is the campaign's bug: say so
                cat.note(f"case {name!r} could not be set up: {e}")
                log(traceback.format_exc())
            finally:
                for fd in (stdin_r, stdin_w):
                    if fd is not None:
                        os.close(fd)
                rmtree(d)

        with ThreadPool(2) as pool:
            list(pool.map(one, list(enumerate(cases))))
        cat.note(", ".join(f"{v} {k}" for k, v in sorted(stats.items())))
        cat.note("apply runs with --prune (stronger than plain --auto-approve); root reads chmod-000 files")
        cat.verdicts = verdicts
        unloc = [n for n, v in verdicts.items() if v[0] == "rejected" and not v[5]]
        if unloc:
            cat.note("rejected without FILE:LINE:COL: " + "; ".join(unloc[:15]) + (" ..." if len(unloc) > 15 else ""))
    finally:
        rmtree(base)
    return cat


# --------------------------------------------------------------------------
# 3. http-abuse


def journal_state(state, pool="web"):
    try:
        return json.loads(read_regular(os.path.join(state, "journal", f"{pool}.json"))).get("status", {}).get("state")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"unreadable ({e})"


def status_doc(port):
    r = http_exchange(("tcp", port), build("GET", "/v1/status", port=port), timeout=5)
    if r["status"] != 200:
        return None
    try:
        return json.loads(r["body"])
    except ValueError:
        return None


def pool_state(port, pool="web"):
    doc = status_doc(port)
    if not doc:
        return None
    for p in doc.get("pools", []):
        if p.get("name") == pool:
            return p.get("state")
    return None


def cat_http(args):
    cat = Category("http-abuse")
    base = tempfile.mkdtemp(prefix="http-", dir=TMP_ROOT)
    d = None
    try:
        cfg = make_config(os.path.join(base, "config"), checkpoint_pause="30m")
        state = os.path.join(base, "state")
        header_timeout = 10
        d = Daemon(cfg, state, grace=10, extra=["--header-timeout", f"{header_timeout}s", "--retry-after", "5s"]).start()
        port = d.port
        sock = os.path.join(state, "control.sock")
        if not d.wait_http("/readyz", 200, timeout=90):
            cat.fail("control", "daemon start", "poolwright run", f"/readyz not 200 within 90 s; alive={d.alive()} "
                     f"stderr: {short(d.stderr(), 600)}")
            return cat
        set_web_image(cfg, "img-2026-12")
        end = time.monotonic() + 60
        while time.monotonic() < end and journal_state(state) != "running":
            time.sleep(0.3)
        if journal_state(state) != "running":
            cat.fail("control", "rollout start", "edit web.yaml image", f"web journal not running within 60 s "
                     f"({journal_state(state)}); stderr: {short(d.stderr(), 600)}")
            return cat
        outside_before = outside_files(base, {"config", "state"})
        tcp = ("tcp", port)
        unix = ("unix", sock)

        def hostile(name, target, data, expect_refused=None, timeout=10, **kw):
            cat.cases += 1
            if expect_refused is None:  # a state change (pause/resume) must be refused
                expect_refused = bool(re.match(rb"^\S+ \S*/v1/pools/", data or b""))
            r = http_exchange(target, data, timeout=timeout, **kw)
            if expect_refused and r["status"] is not None and 200 <= r["status"] < 300:
                cat.fail("unauth", name, f"{target[0]}: {short(data, 160)}",
                         f"answered {describe_http(r)}")
            if not d.alive():
                cat.fail("crash", name, "poolwright run", f"daemon exited rc={d.rc()} after this request; "
                         f"{d.crash()}; stderr: {short(d.stderr(), 600)}")
                raise RuntimeError("daemon died")
            if VERBOSE:
                log(f"  {name}: {describe_http(r)} ({r['elapsed']:.1f}s)")
            return r

        seen_states = []

        def expect_journal(want, phase):
            got = journal_state(state)
            shown = pool_state(port)
            seen_states.append(f"{phase}: journal {got}, /v1/status {shown}")
            if got != want:
                cat.fail("unauth", phase, "journal STATE/journal/web.json",
                         f"web rollout state is {got!r}, expected {want!r} (/v1/status says {shown!r})")

        json_ct = ("Content-Type", "application/json")
        body = b'{"reason":"campaign"}'

        def forgeries(action):
            p = f"/v1/pools/web/{action}"
            P = port
            F = [
                ("Origin evil + text/plain", build("POST", p, [("Origin", "http://evil.example"), ("Content-Type", "text/plain")], body, port=P)),
                ("form urlencoded", build("POST", p, [("Content-Type", "application/x-www-form-urlencoded")], b"reason=x", port=P)),
                ("multipart form", build("POST", p, [("Content-Type", "multipart/form-data; boundary=XX")],
                                         b"--XX\r\nContent-Disposition: form-data; name=\"reason\"\r\n\r\nx\r\n--XX--\r\n", port=P)),
                ("no Content-Type", build("POST", p, [], body, port=P)),
                ("no Content-Type, empty body", build("POST", p, [], b"", port=P)),
                ("JSON + Sec-Fetch-Site cross-site", build("POST", p, [json_ct, ("Sec-Fetch-Site", "cross-site")], body, port=P)),
                ("JSON + Sec-Fetch-Site same-site", build("POST", p, [json_ct, ("Sec-Fetch-Site", "same-site")], body, port=P)),
                ("JSON + Origin evil", build("POST", p, [json_ct, ("Origin", "http://evil.example")], body, port=P)),
                ("JSON + Origin null", build("POST", p, [json_ct, ("Origin", "null")], body, port=P)),
                ("JSON + Origin evil:port", build("POST", p, [json_ct, ("Origin", f"http://evil.example:{P}")], body, port=P)),
                ("JSON + Origin https://localhost", build("POST", p, [json_ct, ("Origin", f"https://localhost:{P}")], body, port=P)),
                ("JSON + Host evil.example", build("POST", p, [json_ct], body, host="evil.example", port=P)),
                ("JSON, no token (local user on TCP)", build("POST", p, [json_ct], body, port=P)),
                ("JSON + Bearer guess", build("POST", p, [json_ct, ("Authorization", "Bearer guess")], body, port=P)),
                ("JSON + empty Bearer", build("POST", p, [json_ct, ("Authorization", "Bearer ")], body, port=P)),
                ("JSON + Basic auth", build("POST", p, [json_ct, ("Authorization", "Basic YTpi")], body, port=P)),
                ("JSON same-origin, no token", build("POST", p, [json_ct, ("Origin", f"http://127.0.0.1:{P}"), ("Sec-Fetch-Site", "same-origin")], body, port=P)),
                ("Content-Type application/json-patch+json", build("POST", p, [("Content-Type", "application/json-patch+json")], body, port=P)),
                ("Content-Type text/plain; application/json", build("POST", p, [("Content-Type", "text/plain; application/json")], body, port=P)),
                ("two Content-Types", build("POST", p, [("Content-Type", "text/plain"), ("Content-Type", "application/json")], body, port=P)),
                ("GET method", build("GET", p, [json_ct], port=P)),
                ("PUT method", build("PUT", p, [json_ct], body, port=P)),
                ("HEAD method", build("HEAD", p, [json_ct], port=P)),
                ("absolute URI evil host", build("POST", f"http://evil.example{p}", [json_ct], body, port=P)),
                ("absolute URI good, Host evil", build("POST", f"http://127.0.0.1:{P}{p}", [json_ct], body, host="evil.example", port=P)),
                ("duplicate Host evil first", build("POST", p, [("Host", f"127.0.0.1:{P}"), json_ct], body, host="evil.example", port=P)),
                ("duplicate Host good first", build("POST", p, [("Host", "evil.example"), json_ct], body, port=P)),
                ("Host with userinfo", build("POST", p, [json_ct], body, host=f"evil.example@127.0.0.1:{P}", port=P)),
                ("Host trailing dot", build("POST", p, [json_ct], body, host=f"localhost.:{P}", port=P)),
                ("Host IPv4-mapped IPv6", build("POST", p, [json_ct], body, host=f"[::ffff:127.0.0.1]:{P}", port=P)),
                ("HTTP/1.0 without Host", build("POST", p, [json_ct], body, host=None, version="HTTP/1.0", port=P)),
                ("JSON with extra fields", build("POST", p, [json_ct], b'{"reason":"x","pool":"api","force":true}', port=P)),
                ("chunked JSON", build("POST", p, [json_ct, ("Transfer-Encoding", "chunked")],
                                       b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body), port=P)),
                ("query string smuggle", build("POST", p + "?token=x&pool=web", [json_ct], body, port=P)),
            ]
            return F

        # ---- phase 1: the rollout runs; hostile pauses and reads --------
        log("  http: phase 1 (forged pauses, names, Host)")
        for n, data in forgeries("pause"):
            hostile(f"pause: {n}", tcp, data)
        expect_journal("running", "after forged pauses")

        names = [
            b"..%2F..%2F..%2Fetc%2Fpasswd", b"%2e%2e", b"%2e%2e%2f%2e%2e%2fpwned", b"..", b".",
            b"../../../etc/passwd", b"web%2F..%2Fweb", b"web%00", b"%00", b"w%C3%A9b",
            b"%EF%BD%97%EF%BD%85%EF%BD%82", b"WEB", b"web%20", b"web%0d%0aX-Injected:%201",
            b"a" * 10000, b"a" * 70000, b"%ff%fe", b"%", b"web%2Fpause", b"victim", b"-", b"a" * 64,
        ]
        raw_names = [b"web\x00", b"\xef\xbd\x97\xef\xbd\x85\xef\xbd\x82", b"web pause"]
        for nm in names + raw_names:
            for act in ("pause", "resume"):
                path = b"/v1/pools/" + nm + b"/" + act.encode()
                shown = nm[:40].decode("latin-1") + ("..." if len(nm) > 40 else "")
                hostile(f"tcp {act} name {shown!r}", tcp, build("POST", path, [json_ct], body, port=port))
        for extra in [b"//v1/pools/web/pause", b"/v1/pools/web/./pause", b"/v1/pools/web//pause",
                      b"/v1/pools/web/PAUSE", b"/V1/pools/web/pause", b"/v1/pools/web/pause#frag",
                      b"/v1/pools/web/pause/../../api/pause"]:
            hostile(f"tcp path {extra.decode()}", tcp, build("POST", extra, [json_ct], body, port=port))

        for path in ("/v1/status", "/v1/plan", "/metrics", "/healthz", "/readyz"):
            for h in ("evil.example", f"evil.example:{port}", f"localhost.evil.example:{port}",
                      f"127.0.0.1.nip.io:{port}"):
                r = hostile(f"GET {path} Host {h}", tcp, build("GET", path, host=h, port=port), expect_refused=False)
                if r["status"] is not None and 200 <= r["status"] < 300:
                    if path in ("/v1/status", "/v1/plan", "/metrics"):
                        cat.fail("unauth", f"GET {path} Host {h}", "DNS rebinding read",
                                 f"answered {describe_http(r)[:80]}")
                    else:
                        cat.note(f"GET {path} with Host {h} answered {r['status']}")
            r = hostile(f"GET {path} HTTP/1.0 without Host", tcp,
                        build("GET", path, host=None, version="HTTP/1.0", port=port), expect_refused=False)
            if r["status"] is not None and 200 <= r["status"] < 300 and path.startswith("/v1"):
                cat.fail("unauth", f"GET {path} without Host", "DNS rebinding read", f"answered {r['status']}")
        expect_journal("running", "after phase 1")

        # ---- positive control: pause through the control socket ---------
        cat.cases += 1
        r = run(["rollout", "pause", "web", "--state-dir", state, "--reason", "campaign control"], timeout=45)
        check(cat, "control: rollout pause web", "poolwright rollout pause web --state-dir S", r)
        end = time.monotonic() + 40
        while time.monotonic() < end and journal_state(state) != "paused":
            time.sleep(0.3)
        if r.rc != 0 or journal_state(state) != "paused":
            cat.fail("control", "rollout pause web (authorised, control socket)", "poolwright rollout pause web",
                     f"{r.describe()} {short(r.stdout + r.stderr)}; journal {journal_state(state)!r}")
        else:
            cat.note("positive control: `rollout pause web` (control.sock) paused the rollout")

        # ---- phase 2: hostile resumes -------------------------------------
        log("  http: phase 2 (forged resumes)")
        for n, data in forgeries("resume"):
            hostile(f"resume: {n}", tcp, data)
        expect_journal("paused", "after forged resumes")

        # ---- phase 3: names on the control socket (authorised peer) ------
        log("  http: phase 3 (traversal on the control socket)")
        for nm in names + raw_names:
            for act in ("pause", "resume"):
                path = b"/v1/pools/" + nm + b"/" + act.encode()
                shown = nm[:40].decode("latin-1") + ("..." if len(nm) > 40 else "")
                hostile(f"socket {act} name {shown!r}", unix,
                        build("POST", path, [json_ct], body, host="localhost", port=port))
        for n, data in [
            ("socket: Origin evil", build("POST", "/v1/pools/web/resume", [json_ct, ("Origin", "http://evil.example")], body, host="localhost")),
            ("socket: form body", build("POST", "/v1/pools/web/resume", [("Content-Type", "application/x-www-form-urlencoded")], b"reason=x", host="localhost")),
            ("socket: cross-site", build("POST", "/v1/pools/web/resume", [json_ct, ("Sec-Fetch-Site", "cross-site")], body, host="localhost")),
        ]:
            hostile(n, unix, data)
        expect_journal("paused", "after socket traversal")
        new = outside_files(base, {"config", "state"}) - outside_before
        if new:
            cat.fail("unauth", "path traversal", "POST /v1/pools/NAME/...", f"files outside the state dir: {sorted(new)[:10]}")

        # ---- phase 4: planted journals ---------------------------------------
        log("  http: phase 4 (planted journals, SIGHUP)")
        web_journal = json.loads(read(os.path.join(state, "journal", "web.json")))
        absolute = os.path.join(base, "pwned-abs")
        outside_target = os.path.join(base, "outside-target.json")
        write(outside_target, b"precious\n")
        for fname, pool in (("victim.json", "../../pwned-dir/x"), ("victim2.json", absolute),
                            ("victim3.json", "victim3/../../../pwned-dir/y")):
            j = dict(web_journal)
            j["pool"] = pool
            write(os.path.join(state, "journal", fname), json.dumps(j))
        os.symlink(outside_target, os.path.join(state, "journal", "victim4.json"))
        cat.cases += 4
        d.signal(signal.SIGHUP)
        time.sleep(3)
        for pool in ("victim", "victim2", "victim3", "victim4"):
            for act in ("pause", "resume"):
                hostile(f"socket {act} planted {pool}", unix,
                        build("POST", f"/v1/pools/{pool}/{act}", [json_ct], body, host="localhost"))
        status_doc(port)
        d.signal(signal.SIGHUP)
        time.sleep(2)
        new = outside_files(base, {"config", "state"}) - outside_before - {"outside-target.json"}
        if new:
            cat.fail("unauth", "planted journal victim.json", "SIGHUP + pause/resume", f"files written outside the state dir: {sorted(new)[:10]}")
        if read(outside_target) != b"precious\n":
            cat.fail("unauth", "planted journal symlink victim4.json", "SIGHUP", "the symlink's target outside the state dir was modified")
        if os.path.lexists(absolute) or os.path.lexists(absolute + ".json"):
            cat.fail("unauth", "planted journal victim2.json", "SIGHUP", f"{absolute} written")
        expect_journal("paused", "after planted journals")

        # ---- phase 5: protocol abuse --------------------------------------
        log("  http: phase 5 (protocol abuse)")

        def after_health(name):
            ok, took, last = probe_health(port, 5)
            if not ok:
                cat.fail("hang", name, "GET /healthz (fresh connection)", f"no 200 within 5 s after this case ({last})")
            return ok

        def big_chunks(total, chunk=65536, payload=b"x"):
            sent = 0
            block = payload * chunk
            while sent < total:
                yield b"%x\r\n" % len(block) + block + b"\r\n"
                sent += len(block)
            yield b"0\r\n\r\n"

        abuse = [
            ("100 KB header", tcp, build("GET", "/healthz", [("X-Big", "a" * 100000)], port=port), {}),
            ("10 MB header", tcp, build("GET", "/healthz", [("X-Big", "a" * (10 << 20))], port=port), {"timeout": 20}),
            ("10,000 headers", tcp, build("GET", "/healthz", [(f"X-H{i}", "v") for i in range(10000)], port=port), {}),
            ("HTTP/0.9 request", tcp, b"GET /healthz\r\n", {}),
            ("binary garbage", tcp, random.Random(7).randbytes(4096), {}),
            ("text garbage", tcp, b"HELLO WORLD\r\n\r\n", {}),
            ("method FOO", tcp, build("FOO", "/healthz", port=port), {}),
            ("method with NUL", tcp, build(b"G\x00ET", "/healthz", port=port), {}),
            ("1000-char method", tcp, build("A" * 1000, "/healthz", port=port), {}),
            ("100 KB URI", tcp, build("GET", "/" + "a" * 100000, port=port), {}),
            ("HTTP/9.9", tcp, build("GET", "/healthz", version="HTTP/9.9", port=port), {}),
            ("HTTP/2 preface", tcp, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00", {}),
            ("TLS ClientHello", tcp, bytes.fromhex("16030100c8010000c40303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00", {}),
            ("Content-Length 10^11, no body", tcp, build("POST", "/v1/pools/web/pause", [json_ct, ("Content-Length", "100000000000")], port=port), {"timeout": 20}),
            ("negative Content-Length", tcp, build("POST", "/v1/pools/web/pause", [json_ct, ("Content-Length", "-1")], port=port), {}),
            ("Content-Length + chunked (smuggling)", tcp, build("POST", "/v1/pools/web/pause", [json_ct, ("Content-Length", "4"), ("Transfer-Encoding", "chunked")], b"0\r\n\r\nPOST /v1/pools/web/resume HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", port=port), {}),
            ("bad chunk size", tcp, build("POST", "/v1/pools/web/pause", [json_ct, ("Transfer-Encoding", "chunked")], b"fffffffffffffffffff\r\nx\r\n", port=port), {}),
            ("obs-fold header", tcp, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-A: a\r\n b\r\n\r\n" % port, {}),
            ("space in header name", tcp, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX Bad: v\r\n\r\n" % port, {}),
            ("NUL in header value", tcp, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-A: a\x00b\r\n\r\n" % port, {}),
            ("Expect: 100-continue with 1 GB", tcp, build("POST", "/v1/pools/web/pause", [json_ct, ("Expect", "100-continue"), ("Content-Length", "1000000000")], port=port), {"timeout": 20}),
            ("socket: binary garbage", unix, random.Random(8).randbytes(4096), {}),
            ("socket: 100 KB header", unix, build("GET", "/healthz", [("X-Big", "a" * 100000)], host="localhost"), {}),
        ]
        for n, target, data, kw in abuse:
            r = hostile(n, target, data, **kw)
            if "header" in n and r["status"] == 200:
                cat.note(f"{n}: answered 200 (accepted)")
            after_health(n)

        for n, target in (("chunked 100 MB body to pause (TCP)", tcp), ("chunked 100 MB body to pause (socket)", unix)):
            head = build("POST", "/v1/pools/web/resume", [json_ct, ("Transfer-Encoding", "chunked")],
                         host="localhost" if target is unix else "DEFAULT", port=port, close=True)
            r = hostile(n, target, head, stream=big_chunks(100 << 20), timeout=30)
            if r["status"] is None and r["error"] == "timeout":
                cat.fail("hang", n, "POST with a 100 MB chunked body", f"no answer and no close within 30 s (sent {r['sent']} bytes)")
            cat.note(f"{n}: {describe_http(r)[:60]} after {r['sent'] >> 20} MiB")
            after_health(n)

        # pipelined
        cat.cases += 1
        pipe = b"".join(build("GET", "/healthz", port=port, close=False) for _ in range(999)) + build("GET", "/healthz", port=port)
        t0 = time.monotonic()
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        got = b""
        try:
            s.sendall(pipe)
            s.settimeout(20)
            while time.monotonic() - t0 < 20:
                c = s.recv(1 << 16)
                if not c:
                    break
                got += c
        except OSError:
            pass
        finally:
            s.close()
        n200 = got.count(b"HTTP/1.1 200")
        if n200 < 1000 and time.monotonic() - t0 >= 20:
            cat.fail("hang", "1000 pipelined requests", "GET /healthz x1000 on one connection", f"{n200} answers within 20 s")
        cat.note(f"1000 pipelined GET /healthz: {n200} answered in {time.monotonic() - t0:.1f}s")
        after_health("1000 pipelined requests")

        # slowloris
        cat.cases += 1
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % port + b"a" * 40
        r = http_exchange(tcp, b"", drip=head, timeout=header_timeout + 15)
        closed_at = r["elapsed"]
        if r["status"] is None and not r["closed"] and r["error"] == "timeout" or closed_at > header_timeout + 5:
            cat.fail("hang", "slowloris (1 byte/s)", "headers 1 byte/s",
                     f"server did not close within {header_timeout}+5 s (outcome after {closed_at:.1f}s: {describe_http(r)})")
        cat.note(f"slowloris: {describe_http(r)[:50]} after {closed_at:.1f}s ({r['sent']} bytes sent)")
        after_health("slowloris")

        # 1000 concurrent
        cat.cases += 1
        log("  http: 1000 concurrent connections")
        res = flood_concurrent(port, 1000, 30)
        cat.note("1000 concurrent GET /healthz: " + ", ".join(f"{v} {k}" for k, v in sorted(res.items())))
        if res.get("unanswered", 0):
            cat.fail("hang", "1000 concurrent GET /healthz", "GET /healthz x1000 at once",
                     f"{res['unanswered']} connections neither answered nor closed within 30 s")
        if not d.alive():
            cat.fail("crash", "1000 concurrent", "poolwright run", f"daemon died: {d.crash()}")
            raise RuntimeError("daemon died")
        after_health("1000 concurrent connections")

        # 900 idle
        cat.cases += 1
        log("  http: 900 idle connections for 30 s")
        res, probes = idle_flood(port, 900, 30, header_timeout)
        cat.note("900 idle connections: " + ", ".join(f"{v} {k}" for k, v in sorted(res.items()) if k != "close_times"))
        bad = [p for p in probes if not p[1]]
        if bad:
            worst = max(p[2] for p in probes)
            cat.fail("hang", "900 idle connections held 30 s", "GET /healthz from a fresh connection every second",
                     f"{len(bad)} of {len(probes)} probes got no 200 within 5 s: /healthz unreachable from "
                     f"+{outage(probes)[0]:.1f}s to {('+%.1fs' % outage(probes)[1]) if outage(probes)[1] else 'the end'} "
                     f"({bad[0][3]}); {res.get('dropped at once', 0)} "
                     f"of the idle connections were closed at once (connection cap), {res.get('accepted', 0)} were "
                     f"held until the header timeout")
        late = res.get("still open after 30 s", 0) + res.get(f"closed after {header_timeout}+5 s", 0)
        if late:
            cat.fail("hang", "900 idle connections held 30 s", "idle connections (no request / after one request)",
                     f"{late} idle connections not closed by the server within header timeout {header_timeout}s + 5 s "
                     f"({', '.join(f'{v} {k}' for k, v in sorted(res.items()))})")
        after_health("900 idle connections")

        cat.cases += 1
        log("  http: 300 connections with stalled request bodies for 30 s")
        res, probes = idle_flood(port, 300, 30, header_timeout, stalled_body=True)
        cat.note("300 stalled bodies (headers with Content-Length 10^11, then silence): "
                 + ", ".join(f"{v} {k}" for k, v in sorted(res.items())))
        bad = [p for p in probes if not p[1]]
        if bad:
            cat.fail("hang", "300 stalled request bodies held 30 s", "GET /healthz from a fresh connection every second",
                     f"{len(bad)} of {len(probes)} probes got no 200 within 5 s: /healthz unreachable from "
                     f"+{outage(probes)[0]:.1f}s to {('+%.1fs' % outage(probes)[1]) if outage(probes)[1] else 'the end of the 30 s'} "
                     f"({bad[0][3]}), i.e. for as long as the stalled connections are held")
        late = res.get("still open after 30 s", 0) + res.get(f"closed after {header_timeout}+5 s", 0)
        if late:
            cat.fail("hang", "300 stalled request bodies held 30 s",
                     "POST /v1/pools/web/pause, Content-Length: 100000000000, no body",
                     f"{late} connections with a stalled body still open after {header_timeout}+5 s: a request "
                     f"body has no deadline, so such connections can hold the connection cap indefinitely")
        after_health("300 stalled request bodies")

        new = outside_files(base, {"config", "state"}) - outside_before - {"outside-target.json"}
        if new:
            cat.fail("unauth", "http abuse", "all requests", f"files outside the state dir: {sorted(new)[:10]}")
        expect_journal("paused", "after protocol abuse and floods")

        # ---- positive control: resume --------------------------------------
        cat.cases += 1
        r = run(["rollout", "resume", "web", "--state-dir", state], timeout=45)
        check(cat, "control: rollout resume web", "poolwright rollout resume web --state-dir S", r)
        end = time.monotonic() + 20
        while time.monotonic() < end and journal_state(state) not in ("running", None):
            time.sleep(0.3)
        if r.rc != 0 or journal_state(state) not in ("running", None):
            cat.fail("control", "rollout resume web (authorised)", "poolwright rollout resume web",
                     f"{r.describe()} {short(r.stdout + r.stderr)}; journal {journal_state(state)!r}")
        else:
            cat.note("positive control: `rollout resume web` resumed it")
        r = run(["status", "--state-dir", state, "-o", "json"], timeout=20)
        check(cat, "control: status", "poolwright status --state-dir S -o json", r)

        cat.note("web: " + "; ".join(seen_states))

        # ---- SIGTERM ---------------------------------------------------------
        cat.cases += 1
        ok, took, rc = d.terminate()
        cat.note(f"SIGTERM: exit {rc} after {took:.1f}s (grace {d.grace}s)")
        if not ok:
            cat.fail("hang", "SIGTERM", "kill -TERM poolwright run", f"no exit within grace {d.grace}s + 5 s")
        c = d.crash()
        if c:
            cat.fail("crash", "daemon", "poolwright run", f"{c}; stderr: {short(d.stderr(), 800)}")
        elif rc not in (0, None) and ok:
            cat.note(f"daemon exit code after SIGTERM: {rc}")
    except RuntimeError as e:
        cat.note(f"stopped early: {e}")
    finally:
        if d is not None:
            if d.alive():
                d.sigkill()
            c = d.crash()
            if c and not any(f[0] == "crash" for f in cat.failures):
                cat.fail("crash", "daemon", "poolwright run", f"{c}; stderr: {short(d.stderr(), 800)}")
            if VERBOSE:
                log(short(d.stderr(), 4000))
        rmtree(base)
    return cat


def outage(probes):
    """(from, to) seconds of the first window in which fresh /healthz probes
    failed, to the first 200 after it (None when every probe passed)."""
    start = None
    for t, ok, took, last in probes:
        if not ok and start is None:
            start = t
        elif ok and start is not None:
            return start, t + took
    return (start, None) if start is not None else None


def flood_concurrent(port, n, deadline):
    sel = selectors.DefaultSelector()
    req = build("GET", "/healthz", port=port)
    res = collections.Counter()
    conns = {}
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            res[f"connect error {errno.errorcode.get(err, err)}"] += 1
            s.close()
            continue
        conns[s] = [False, b""]
        sel.register(s, selectors.EVENT_WRITE)

    def done(s, outcome):
        res[outcome] += 1
        sel.unregister(s)
        s.close()
        del conns[s]

    while conns and time.monotonic() - t0 < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            c = conns.get(s)
            if c is None:
                continue
            if not c[0]:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    done(s, f"connect error {errno.errorcode.get(err, err)}")
                    continue
                try:
                    s.send(req)
                except OSError:
                    done(s, "reset before the request was sent")
                    continue
                c[0] = True
                sel.modify(s, selectors.EVENT_READ)
            else:
                try:
                    data = s.recv(65536)
                except OSError:
                    done(s, "reset (no answer)")
                    continue
                if data:
                    c[1] += data
                    if not complete(c[1]):
                        continue
                h = parse_head(c[1])
                if h and h[0] == 200:
                    done(s, "answered 200")
                elif h:
                    done(s, f"answered {h[0]}")
                else:
                    done(s, "closed without an answer (at the connection cap)")
    for s in list(conns):
        done(s, "unanswered")
    return res


def idle_flood(port, n, hold, header_timeout, stalled_body=False):
    """Open n idle connections (half silent, half idle after one request; or,
    with stalled_body, each sending complete headers announcing a huge body
    and then nothing), hold them `hold` seconds, probing /healthz from fresh
    connections every second. (outcomes, probes [(t, ok, took, last)])."""
    socks = {}
    res = collections.Counter()
    t_start = time.monotonic()
    sel = selectors.DefaultSelector()
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError as e:
            res[f"connect error {type(e).__name__}"] += 1
            continue
        opened = time.monotonic()
        if stalled_body:
            try:
                s.sendall(build("POST", "/v1/pools/web/pause", [("Content-Type", "application/json"),
                                                                ("Content-Length", "100000000000")],
                                port=port, close=False))
            except OSError:
                res["dropped at once"] += 1
                s.close()
                continue
        elif i % 2:
            try:
                s.sendall(build("GET", "/healthz", port=port, close=False))
                s.settimeout(2)
                buf = b""
                while not complete(buf):
                    c = s.recv(65536)
                    if not c:
                        break
                    buf += c
                if not complete(buf):
                    res["dropped at once"] += 1
                    s.close()
                    continue
                opened = time.monotonic()
            except OSError:
                res["dropped at once"] += 1
                s.close()
                continue
        s.setblocking(False)
        socks[s] = opened
        sel.register(s, selectors.EVENT_READ)
    probes = []
    stop = threading.Event()

    def prober():
        while not stop.is_set():
            t = time.monotonic() - t_start
            ok, took, last = probe_health(port, 5)
            probes.append((t, ok, took, last))
            stop.wait(max(0, 1 - took))

    th = threading.Thread(target=prober, daemon=True)
    th.start()
    close_times = []
    while time.monotonic() - t_start < hold:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if data:
                res["answered"] += 1
                continue
            age = time.monotonic() - socks.pop(s)
            sel.unregister(s)
            s.close()
            close_times.append(age)
    stop.set()
    th.join(10)
    for s in list(socks):
        res["still open after %d s" % hold] += 1
        s.close()
    for age in close_times:
        if age < 1.5:
            res["dropped at once"] += 1
        elif age <= header_timeout + 5:
            res[f"closed within {header_timeout}+5 s"] += 1
        else:
            res[f"closed after {header_timeout}+5 s"] += 1
    res["accepted"] = n - res["dropped at once"] - sum(v for k, v in res.items() if k.startswith("connect error"))
    return res, probes


# --------------------------------------------------------------------------
# 4. kill-9

KILL_SIZE = 6
KILL_SURGE = 2
KILL_UNAVAIL = 0


def audit_lines(state, since=0):
    """[(ts, call)] of the simulator's audit after line `since`."""
    path = os.path.join(state, "sim", "sim.audit.jsonl")
    out = []
    try:
        lines = read_regular(path).decode("utf-8", "replace").splitlines()
    except OSError:
        return out
    for line in lines[since:]:
        try:
            v = json.loads(line)
            out.append((v.get("ts"), v["call"]))
        except (ValueError, KeyError):
            out.append((None, line))
    return out


def utc_now():
    t = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"


def audit_calls(state, since=0):
    path = os.path.join(state, "sim", "sim.audit.jsonl")
    calls, bad = [], 0
    try:
        lines = read_regular(path).decode("utf-8", "replace").splitlines()
    except OSError:
        return [], 0
    for line in lines[since:]:
        if not line.strip():
            continue
        try:
            calls.append(json.loads(line)["call"])
        except (ValueError, KeyError):
            bad += 1
    return calls, bad


def kill_trial(n, seed, cat, budget_end):
    rng = random.Random(seed * 1000 + n)
    case = f"trial {n}"
    d = tempfile.mkdtemp(prefix=f"kill{n}-", dir=TMP_ROOT)
    daemon = None
    info = {"kills": 0, "mid": 0}
    try:
        cfg = make_config(os.path.join(d, "config"), speed=40, latencies=True, fast_web=True)
        state = os.path.join(d, "state")
        r = run(["apply", cfg, "--state-dir", state, "--auto-approve"], timeout=60)
        if not check(cat, case, "apply (create pools)", r) or r.rc != 0:
            cat.fail("control", case, "apply examples", r.describe() + " " + short(r.stderr))
            return info
        time.sleep(1.0)  # nodes boot (0.5 s) and turn healthy (0.125 s)
        fleet, err = load_fleet(state)
        web = fleet["pools"]["web"]
        old_nodes = {x["id"] for x in web["nodes"] if not x.get("goneAt")}
        serial0 = fleet["nextSerial"]
        audit0 = len(read(os.path.join(state, "sim", "sim.audit.jsonl")).splitlines())
        set_web_image(cfg, f"img-trial-{n}")
        kills = rng.randint(1, 3)
        extra = ["--retry-after", "2s"]
        timeline = []
        for k in range(kills):
            daemon = Daemon(cfg, state, grace=10, extra=extra).start()
            timeline.append(f"start {utc_now()}")
            t = rng.uniform(0.2, 6.0)
            time.sleep(t)
            if not daemon.alive():
                c = daemon.crash()
                what = c or f"exited rc={daemon.rc()} before the kill"
                cat.fail("crash" if c else "control", case, f"poolwright run (kill {k + 1} at {t:.1f}s)",
                         f"{what}; stderr: {short(daemon.stderr(), 600)}")
                daemon.finish()
                daemon = None
                continue
            mid = os.path.exists(os.path.join(state, "journal", "web.json"))
            daemon.sigkill()
            timeline.append(f"SIGKILL {utc_now()} (+{t:.2f}s)")
            c = crash_reason(Res(daemon.cmd, 0, False, 0, "", daemon.stderr()))
            if c:
                cat.fail("crash", case, f"poolwright run (before kill {k + 1})", f"{c}; stderr: {short(daemon.stderr(), 600)}")
            daemon = None
            info["kills"] += 1
            info["mid"] += int(mid)
            fleet_now, err = load_fleet(state)
            if fleet_now is None:
                cat.fail("loss", case, f"SIGKILL {k + 1} at {t:.1f}s", f"fleet file corrupt after the kill: {err}")
        # converge
        daemon = Daemon(cfg, state, grace=10, extra=extra).start()
        timeline.append(f"final start {utc_now()}")
        end = time.monotonic() + 90
        converged = False
        last = None
        while time.monotonic() < end:
            if not daemon.alive():
                break
            r = run(["plan", cfg, "--state-dir", state, "--detailed-exitcode"], timeout=20)
            check(cat, case, "plan --detailed-exitcode (while converging)", r)
            last = r
            if r.rc == 0:
                converged = True
                break
            time.sleep(1)
        if not daemon.alive():
            c = daemon.crash()
            cat.fail("crash" if c else "control", case, "poolwright run (final)",
                     f"{c or 'exited rc=%s' % daemon.rc()}; stderr: {short(daemon.stderr(), 600)}")
        ok, took, rc = daemon.terminate()
        if not ok:
            cat.fail("hang", case, "SIGTERM poolwright run", f"no exit within grace 10 s + 5 s")
        c = daemon.crash()
        if c:
            cat.fail("crash", case, "poolwright run (final)", f"{c}; stderr: {short(daemon.stderr(), 600)}")
        daemon = None
        if not converged:
            cat.fail("hang", case, "converge: plan --detailed-exitcode == 0",
                     f"not converged within 90 s after {info['kills']} kill(s); last plan {last.describe() if last else '-'}: "
                     f"{short((last.stdout + last.stderr) if last else '', 500)}")
        # checks
        fleet, err = load_fleet(state)
        if fleet is None:
            cat.fail("loss", case, "final", f"fleet file corrupt: {err}")
            return info
        web = fleet["pools"].get("web")
        if not web:
            cat.fail("loss", case, "final", "pool web is gone from the fleet")
            return info
        inv = inventory_pools(state)
        if inv is None or not {"api", "batch", "cache", "web"} <= inv:
            cat.fail("loss", case, "final", f"inventory lost pools: {inv}")
        live = [x for x in web["nodes"] if not x.get("goneAt")]
        if converged and (len(live) != KILL_SIZE or web["size"] != KILL_SIZE):
            cat.fail("loss", case, "final", f"web has {len(live)} live nodes, size {web['size']}, expected {KILL_SIZE}")
        if converged and any(x["template"] != web["templateHash"] for x in live):
            cat.fail("loss", case, "final", "web has live nodes on an old template after convergence")
        calls, bad = audit_calls(state, audit0)
        if bad:
            cat.fail("loss", case, "audit", f"{bad} unparsable audit lines")
        terms = [re.match(r"TerminateNode\(web, ([^,)]+)", c).group(1) for c in calls if c.startswith("TerminateNode(web,")]
        dup = [x for x, k in collections.Counter(terms).items() if k > 1]
        if dup:
            al = audit_lines(state, audit0)
            same = [x for x in dup if len({ts for ts, c in al if c.startswith(f"TerminateNode(web, {x},")}) == 1]
            lines = [f"{ts[11:23] if ts else '?'} {c}" for ts, c in al
                     if any(x in c for x in dup) or not c.startswith(("Cordon", "Uncordon"))]
            what = (f"node(s) {same} appear terminated twice in the audit, as duplicate lines with identical "
                    f"timestamps (the fleet shows one termination: the audit record was written twice, consistent "
                    f"with Sim::open's repair_audit running in the concurrent `plan` without the state lock)"
                    if same == dup else f"node(s) terminated twice (distinct calls): {dup}")
            cat.fail("loss", case, "audit (STATE/sim/sim.audit.jsonl)",
                     f"{what}; timeline (UTC): {', '.join(timeline)}; audit after the image change: {' ; '.join(lines)}")
        wrong = [x for x in terms if x not in old_nodes]
        if wrong:
            cat.fail("loss", case, "audit", f"updated node(s) terminated: {wrong}")
        launched = fleet["nextSerial"] - serial0
        info["terminations"] = len(terms)
        info["launched"] = launched
        if VERBOSE:
            log(f"  {case}: {info['kills']} kills ({info['mid']} mid-rollout), converged={converged}, "
                f"{len(terms)} TerminateNode, {launched} launched, live {len(live)}, calls {len(calls)}")
        if converged and launched != KILL_SIZE:
            cat.fail("loss", case, "audit", f"{launched} nodes launched for {KILL_SIZE} replacements "
                     f"(double action); calls: {short('; '.join(calls), 600)}")
        if converged and set(terms) != old_nodes:
            missing = old_nodes - set(terms)
            if missing:
                cat.note(f"{case}: old nodes retired without TerminateNode: {sorted(missing)}")
        # bounds over the event history
        ev_path = os.path.join(state, "events.jsonl")
        if os.path.exists(ev_path):
            started = False
            for line in read(ev_path).decode("utf-8", "replace").splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    cat.fail("loss", case, "events.jsonl", f"unparsable line {short(line, 100)}")
                    continue
                if e.get("pool") != "web":
                    continue
                if e.get("event") == "rollout_started":
                    started = True
                c = e.get("counts")
                if not started or not c:
                    continue
                if c.get("total", 0) > KILL_SIZE + KILL_SURGE or c.get("available", KILL_SIZE) < KILL_SIZE - KILL_UNAVAIL:
                    cat.fail("loss", case, "events.jsonl bounds",
                             f"capacity bounds broken (total<= {KILL_SIZE + KILL_SURGE}, available >= "
                             f"{KILL_SIZE - KILL_UNAVAIL}): {short(line, 300)}")
                    break
        return info
    finally:
        if daemon is not None:
            daemon.sigkill()
        rmtree(d)


def concurrent_plan_case(cat, seconds=60):
    """`plan` polled back to back while the daemon rolls web again and again
    (for `seconds`): a read-only command must not write the simulator's audit."""
    case = "plan polled during rollouts"
    d = tempfile.mkdtemp(prefix="plan-poll-", dir=TMP_ROOT)
    daemon = None
    try:
        cfg = make_config(os.path.join(d, "config"), speed=40, latencies=True, fast_web=True)
        state = os.path.join(d, "state")
        r = run(["apply", cfg, "--state-dir", state, "--auto-approve"], timeout=60)
        if r.rc != 0:
            cat.fail("control", case, "apply", r.describe())
            return
        time.sleep(1)
        audit0 = len(read(os.path.join(state, "sim", "sim.audit.jsonl")).splitlines())
        daemon = Daemon(cfg, state, grace=10, extra=["--retry-after", "2s"]).start()
        if not daemon.wait_http("/readyz", 200, 60):
            cat.fail("control", case, "poolwright run", "not ready")
            return
        plans = 0
        t0 = time.monotonic()
        rollouts = 0
        while time.monotonic() - t0 < seconds:
            rollouts += 1
            set_web_image(cfg, f"img-poll-{rollouts}")
            t1 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                r = run(["plan", cfg, "--state-dir", state, "--detailed-exitcode"], timeout=20)
                plans += 1
                check(cat, case, "plan --detailed-exitcode (back to back)", r)
                if r.rc == 0 and time.monotonic() - t1 > 1:
                    break
        ok, took, rc = daemon.terminate()
        if not ok:
            cat.fail("hang", case, "SIGTERM poolwright run", "no exit within grace + 5 s")
        c = daemon.crash()
        if c:
            cat.fail("crash", case, "poolwright run", c)
        daemon = None
        al = audit_lines(state, audit0)
        dups = [f"{ts[11:23]} {c}" for (ts, c), k in collections.Counter(al).items() if k > 1]
        cat.note(f"{case}: {plans} plans during {rollouts} rollouts, {len(al)} audit lines, {len(dups)} duplicated")
        if dups:
            cat.fail("loss", case, "poolwright plan (read-only) while `poolwright run` rolls",
                     f"{len(dups)} audit line(s) of STATE/sim/sim.audit.jsonl written twice with identical "
                     f"timestamps: {'; '.join(dups[:6])} (a read-only plan writes the audit: Sim::open runs "
                     f"repair_audit without the state lock, racing the daemon's own append)")
    finally:
        if daemon is not None:
            daemon.sigkill()
        rmtree(d)


def cat_kill9(args):
    cat = Category("kill-9")
    if not args.case or args.case in "plan polled during rollouts":
        concurrent_plan_case(cat)
        cat.cases += 1
        if args.case:
            return cat
    t0 = time.monotonic()
    budget_end = t0 + args.kill_budget
    totals = collections.Counter()
    done = [0]

    def one(n):
        if time.monotonic() > budget_end:
            return None
        try:
            info = kill_trial(n, args.seed, cat, budget_end)
        except Exception as e:
            cat.fail("control", f"trial {n}", "campaign", f"the trial itself failed: {e!r}")
            log(traceback.format_exc())
            info = {}
        with LOCK:
            totals.update(info)
            done[0] += 1
            if done[0] % 10 == 0:
                log(f"  kill-9: {done[0]} trials, {time.monotonic() - t0:.0f}s")
        return info

    with ThreadPool(2) as pool:
        list(pool.map(one, range(args.kill_trials)))
    cat.cases += done[0]
    cat.note(f"{done[0]} of {args.kill_trials} trials in {time.monotonic() - t0:.0f}s; {totals['kills']} SIGKILLs, "
             f"{totals['mid']} while web's rollout journal existed (mid-rollout); web size {KILL_SIZE}, surge "
             f"{KILL_SURGE}, unavailable {KILL_UNAVAIL}, sim speed 40")
    if done[0] < args.kill_trials:
        cat.note(f"time budget of {args.kill_budget}s reached: {args.kill_trials - done[0]} trials not run")
    return cat


# --------------------------------------------------------------------------
# 5. disk-faults


def disk_cases():
    """(name, prepare(ctx) , commands) — ctx has cfg, state, aux, base (populated
    state to copy). commands: list of 'apply' | 'plan' | 'run' | 'status' |
    'rollout-pause' | ('apply-events', path)."""
    C = []

    def case(name, cmds=("apply", "plan"), expect="refuse", **kw):
        def deco(fn):
            C.append((name, fn, list(cmds), expect, kw))
            return fn
        return deco

    def populated(ctx, where=None):
        where = where or ctx.state
        if os.path.isdir(where) and not os.listdir(where):
            os.rmdir(where) if not os.path.ismount(where) else None
        if os.path.ismount(where):
            for n in os.listdir(ctx.base):
                src = os.path.join(ctx.base, n)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(where, n), symlinks=True)
                else:
                    shutil.copy2(src, os.path.join(where, n))
        else:
            shutil.copytree(ctx.base, where, symlinks=True)

    @case("state dir on an empty read-only tmpfs", cmds=("apply", "plan", "run"), plan_ok=True)
    def _(ctx):
        mount_tmpfs(ctx.state, "64k", ro=True)

    @case("populated state dir bind-mounted read-only", cmds=("apply", "plan", "run", "rollout-pause"), plan_ok=True)
    def _(ctx):
        src = os.path.join(ctx.aux, "state-src")
        shutil.copytree(ctx.base, src, symlinks=True)
        bind_ro(src, ctx.state)

    @case("populated state dir on a full tmpfs", cmds=("apply", "plan", "run"), plan_ok=True)
    def _(ctx):
        mount_tmpfs(ctx.state, "64k")
        populated(ctx)
        fill(ctx.state)

    @case("populated state dir on a 16k tmpfs (full)", cmds=("apply", "plan"), plan_ok=True)
    def _(ctx):
        mount_tmpfs(ctx.state, "16k")
        try:
            populated(ctx)
        except OSError:
            pass
        fill(ctx.state)

    @case("ENOSPC mid-rollout, then space freed", cmds=("apply", "grow", "apply-converge"), expect="any")
    def _(ctx):
        mount_tmpfs(ctx.state, "96k")
        populated(ctx)
        # leave a few KiB: the journal fits, a fleet save does not for long
        fill(ctx.state)
        for n in sorted(os.listdir(ctx.state)):
            if n.startswith(".filler"):
                p = os.path.join(ctx.state, n)
                if os.path.getsize(p) > 12288:
                    with open(p, "r+b") as f:
                        f.truncate(os.path.getsize(p) - 12288)
                    break

    @case("daemon on a nearly full tmpfs, then space freed", cmds=("run-8s", "grow", "apply-converge"), expect="any")
    def _(ctx):
        mount_tmpfs(ctx.state, "96k")
        populated(ctx)
        fill(ctx.state)
        for n in sorted(os.listdir(ctx.state)):
            if n.startswith(".filler"):
                p = os.path.join(ctx.state, n)
                if os.path.getsize(p) > 16384:
                    with open(p, "r+b") as f:
                        f.truncate(os.path.getsize(p) - 16384)
                    break

    @case("apply --events DIR (a directory)", cmds=(("apply-events", "dir"),))
    def _(ctx):
        populated(ctx)
        os.mkdir(os.path.join(ctx.aux, "dir"))

    @case("apply --events /dev/full", cmds=(("apply-events", "/dev/full"),))
    def _(ctx):
        populated(ctx)

    @case("apply --events FIFO", cmds=(("apply-events", "fifo"),))
    def _(ctx):
        populated(ctx)
        mkfifo(os.path.join(ctx.aux, "fifo"))

    @case("STATE/events.jsonl is a directory", cmds=("run",))
    def _(ctx):
        populated(ctx)
        os.mkdir(os.path.join(ctx.state, "events.jsonl"))

    @case("STATE/events.jsonl is a FIFO", cmds=("run",))
    def _(ctx):
        populated(ctx)
        mkfifo(os.path.join(ctx.state, "events.jsonl"))

    @case("STATE/journal is a regular file", cmds=("apply", "plan", "rollout-pause"))
    def _(ctx):
        populated(ctx)
        write(os.path.join(ctx.state, "journal"), b"not a directory\n")

    @case("STATE/journal on a read-only tmpfs", cmds=("apply",))
    def _(ctx):
        populated(ctx)
        mount_tmpfs(os.path.join(ctx.state, "journal"), "16k", ro=True)

    @case("journal web.json is a FIFO", cmds=("apply", "plan", "rollout-pause"))
    def _(ctx):
        populated(ctx)
        mkfifo(os.path.join(ctx.state, "journal", "web.json"))

    @case("journal web.json is corrupt", cmds=("apply", "plan"))
    def _(ctx):
        populated(ctx)
        write(os.path.join(ctx.state, "journal", "web.json"), b'{"pool": "web", "target": ')

    @case("journal web.json is a directory", cmds=("apply", "plan"))
    def _(ctx):
        populated(ctx)
        os.makedirs(os.path.join(ctx.state, "journal", "web.json"))

    @case("journal web.json symlink -> a file outside", cmds=("apply",), expect="any", outside="outside.txt")
    def _(ctx):
        populated(ctx)
        write(os.path.join(ctx.aux, "outside.txt"), b"precious\n")
        os.makedirs(os.path.join(ctx.state, "journal"), exist_ok=True)
        os.symlink(os.path.join(ctx.aux, "outside.txt"), os.path.join(ctx.state, "journal", "web.json"))

    def fleet_case(name, mutate, cmds=("apply", "plan")):
        def fn(ctx):
            populated(ctx)
            mutate(os.path.join(ctx.state, "sim", "sim.json"), ctx)
        C.append((name, fn, list(cmds), "refuse", {"fleet_must_stay": True}))

    def truncate_half(p, ctx):
        data = read(p)
        write(p, data[: len(data) // 2])
    fleet_case("sim fleet file truncated", truncate_half)
    fleet_case("sim fleet file empty", lambda p, ctx: write(p, b""))
    fleet_case("sim fleet file binary garbage", lambda p, ctx: write(p, random.Random(3).randbytes(5000)))
    fleet_case("sim fleet file format 2", lambda p, ctx: write(p, read(p).replace(b'"format":1', b'"format":2')))
    fleet_case("sim fleet file is []", lambda p, ctx: write(p, b"[]"))
    fleet_case("sim fleet file NUL-padded (torn write)", lambda p, ctx: write(p, read(p)[:2000] + b"\0" * 4000))

    def to_dir(p, ctx):
        os.unlink(p)
        os.mkdir(p)
    fleet_case("sim fleet file is a directory", to_dir)

    def to_fifo(p, ctx):
        os.unlink(p)
        os.mkfifo(p)
    fleet_case("sim fleet file is a FIFO", to_fifo, cmds=("apply", "plan", "run"))

    def to_zero(p, ctx):
        os.unlink(p)
        os.symlink("/dev/zero", p)
    fleet_case("sim fleet file symlink -> /dev/zero", to_zero)

    def to_huge(p, ctx):
        with open(p, "r+b") as f:
            f.truncate(300 << 20)
    fleet_case("sim fleet file 300 MiB (sparse tail)", to_huge)

    @case("STATE/sim is a regular file", cmds=("plan", "apply"))
    def _(ctx):
        populated(ctx)
        shutil.rmtree(os.path.join(ctx.state, "sim"))
        write(os.path.join(ctx.state, "sim"), b"x")

    @case("sim fleet file is a dangling symlink", cmds=("plan", "apply"))
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "sim", "sim.json")
        os.unlink(p)
        os.symlink(os.path.join(ctx.aux, "gone", "sim.json"), p)

    @case("STATE/sim is a dangling symlink", cmds=("plan", "apply"))
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "sim")
        shutil.rmtree(p)
        os.symlink(os.path.join(ctx.aux, "unmounted-volume"), p)

    @case("sim audit file is a directory", cmds=("apply",), expect="any")
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "sim", "sim.audit.jsonl")
        os.unlink(p)
        os.mkdir(p)

    @case("lock held by another process", cmds=("apply", "run", "rollout-pause"), hold_lock=True)
    def _(ctx):
        populated(ctx)

    @case("STATE/lock is a directory", cmds=("apply", "run"))
    def _(ctx):
        populated(ctx)
        os.unlink(os.path.join(ctx.state, "lock")) if os.path.exists(os.path.join(ctx.state, "lock")) else None
        os.mkdir(os.path.join(ctx.state, "lock"))

    @case("STATE/lock is a FIFO", cmds=("apply",))
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "lock")
        if os.path.lexists(p):
            os.unlink(p)
        os.mkfifo(p)

    @case("STATE/lock symlink -> a file outside", cmds=("apply",), expect="any", outside="outside.txt")
    def _(ctx):
        populated(ctx)
        write(os.path.join(ctx.aux, "outside.txt"), b"precious\n")
        p = os.path.join(ctx.state, "lock")
        if os.path.lexists(p):
            os.unlink(p)
        os.symlink(os.path.join(ctx.aux, "outside.txt"), p)

    for label, data in (("corrupt", b'{"pools": {"web": '), ("empty", b""), ("[]", b"[]")):
        def fn(ctx, data=data):
            populated(ctx)
            write(os.path.join(ctx.state, "inventory.json"), data)
        C.append((f"inventory.json {label}", fn, ["apply", "plan"], "refuse", {"inventory_must_stay": True}))

    @case("inventory.json is a FIFO", cmds=("apply", "plan", "run"))
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "inventory.json")
        os.unlink(p)
        os.mkfifo(p)

    @case("inventory.json is a directory", cmds=("apply", "plan"))
    def _(ctx):
        populated(ctx)
        p = os.path.join(ctx.state, "inventory.json")
        os.unlink(p)
        os.mkdir(p)

    @case("state dir is a regular file", cmds=("apply", "plan", "run"))
    def _(ctx):
        write(ctx.state, b"x")

    @case("state dir is a symlink loop", cmds=("apply", "plan", "run"))
    def _(ctx):
        os.symlink(ctx.state, ctx.state)

    @case("STATE/control.sock is a regular file", cmds=("run",))
    def _(ctx):
        populated(ctx)
        write(os.path.join(ctx.state, "control.sock"), b"x")

    @case("STATE/daemon.json is a FIFO", cmds=("status", "rollout-pause"))
    def _(ctx):
        populated(ctx)
        mkfifo(os.path.join(ctx.state, "daemon.json"))

    @case("STATE/daemon.json points at a socket that never answers", cmds=("status", "rollout-pause"), silent_socket=True)
    def _(ctx):
        populated(ctx)

    @case("STATE/overrides.jsonl is a FIFO", cmds=("apply", "plan"), expect="any")
    def _(ctx):
        populated(ctx)
        mkfifo(os.path.join(ctx.state, "overrides.jsonl"))
    return C


class Ctx:
    pass


def cat_disk(args):
    cat = Category("disk-faults")
    root = tempfile.mkdtemp(prefix="disk-", dir=TMP_ROOT)
    try:
        base_cfg = make_config(os.path.join(root, "config"), speed=40, latencies=True, fast_web=True)
        base_state = os.path.join(root, "base-state")
        r = run(["apply", base_cfg, "--state-dir", base_state, "--auto-approve"], timeout=60)
        if r.rc != 0:
            cat.fail("control", "base apply", "apply", r.describe() + short(r.stderr))
            return cat
        time.sleep(1)
        for p in ("lock",):
            if os.path.exists(os.path.join(base_state, p)):
                os.unlink(os.path.join(base_state, p))
        cases = disk_cases()
        if args.case:
            cases = [c for c in cases if args.case in c[0]]
        cat.cases = len(cases)
        outcomes = []
        for i, (name, prepare, cmds, expect, kw) in enumerate(cases):
            d = os.path.join(root, f"case{i:02d}")
            ctx = Ctx()
            ctx.cfg = os.path.join(d, "config")
            ctx.state = os.path.join(d, "state")
            ctx.aux = os.path.join(d, "aux")
            ctx.base = base_state
            holder = None
            silent = None
            try:
                os.makedirs(ctx.aux)
                shutil.copytree(base_cfg, ctx.cfg)
                set_web_image(ctx.cfg, "img-disk-2")  # a pending rollout: apply must journal first
                prepare(ctx)
                if kw.get("hold_lock"):
                    holder = open(os.path.join(ctx.state, "lock"), "a+")
                    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if kw.get("silent_socket"):
                    sp = os.path.join(ctx.aux, "silent.sock")
                    silent = socket.socket(socket.AF_UNIX)
                    silent.bind(sp)
                    silent.listen(100)
                    write(os.path.join(ctx.state, "daemon.json"),
                          json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:9", "controlSocket": sp,
                                      "startedAt": "2026-01-01T00:00:00Z"}))
                fleet_before, ferr = load_fleet(ctx.state) if os.path.isdir(ctx.state) else (None, "no dir")
                fleet_bytes = None
                fp = os.path.join(ctx.state, "sim", "sim.json")
                if os.path.lexists(fp) and os.path.isfile(fp) and not os.path.islink(fp) and os.path.getsize(fp) < 64 << 20:
                    fleet_bytes = read_regular(fp)
                inv_p = os.path.join(ctx.state, "inventory.json")
                inv_bytes = read_regular(inv_p) if os.path.isfile(inv_p) else None
                inv_before = inventory_pools(ctx.state) if os.path.isdir(ctx.state) else None
                summary = []
                for cmd in cmds:
                    out = disk_command(cat, name, ctx, cmd, "any" if (cmd == "plan" and kw.get("plan_ok")) else expect)
                    summary.append(out)
                # after: no partial/corrupt state
                if os.path.isdir(ctx.state):
                    fleet_after, aerr = load_fleet(ctx.state)
                    if fleet_before is not None and fleet_after is None:
                        cat.fail("loss", name, " ; ".join(map(str, cmds)), f"fleet file no longer parses: {aerr}")
                    if kw.get("fleet_must_stay") and fleet_bytes is not None and os.path.isfile(fp):
                        if read_regular(fp, 1 << 30) != fleet_bytes:
                            cat.fail("loss", name, " ; ".join(map(str, cmds)),
                                     "the unreadable fleet file was replaced (an existing fleet overwritten)")
                    inv_after = inventory_pools(ctx.state)
                    if inv_before and inv_after is not None and inv_before - inv_after:
                        cat.fail("loss", name, " ; ".join(map(str, cmds)),
                                 f"pools dropped from the inventory: {sorted(inv_before - inv_after)} (the desired "
                                 f"state still has them; they are no longer managed: never pruned, reported as "
                                 f"unmanaged)")
                    if kw.get("inventory_must_stay") and inv_bytes is not None and os.path.isfile(inv_p):
                        if read_regular(inv_p) != inv_bytes:
                            cat.fail("loss", name, " ; ".join(map(str, cmds)), "the unreadable inventory was replaced")
                    if fleet_before is not None and fleet_after is not None and expect == "refuse":
                        b, a = fleet_summary(fleet_before), fleet_summary(fleet_after)
                        jr = os.path.join(ctx.state, "journal", "web.json")
                        journaled = os.path.isfile(jr)
                        if b.get("web", (None,))[0] != a.get("web", (None,))[0] and not journaled:
                            cat.fail("unauth", name, " ; ".join(map(str, cmds)),
                                     "web's template was changed at the provider but no rollout journal exists "
                                     "(a side effect without a journal)")
                        elif a != b:
                            cat.note(f"{name}: the fleet changed although a refusal was expected "
                                     f"({[p for p in a if a.get(p) != b.get(p)]})")
                if kw.get("outside"):
                    if read_regular(os.path.join(ctx.aux, kw["outside"])) != b"precious\n":
                        cat.note(f"{name}: the file outside the state dir was modified through the symlink")
                        cat.fail("unauth", name, " ; ".join(map(str, cmds)),
                                 "a file outside the state dir was overwritten through a symlink in the state dir")
                outcomes.append(f"{name}: " + ", ".join(summary))
                if VERBOSE:
                    log(f"  {name}: {', '.join(summary)}")
            except Exception as e:
                cat.note(f"case {name!r} could not be set up: {e}")
                log(traceback.format_exc())
            finally:
                if holder:
                    holder.close()
                if silent:
                    silent.close()
                for m in reversed(list(MOUNTS)):
                    if m.startswith(d):
                        umount(m)
                rmtree(d)
        cat.outcomes = outcomes
        for o in outcomes:
            log("  " + o)
        accepted = [o for o in outcomes if "exit 0" in o and "refuse" in o]
        cat.note(f"{len(cases)} cases, commands per case listed in the details with --verbose")
    finally:
        for m in reversed(list(MOUNTS)):
            if m.startswith(root):
                umount(m)
        rmtree(root)
    return cat


def disk_command(cat, name, ctx, cmd, expect):
    S = ctx.state
    if cmd == "grow":
        try:
            for n in os.listdir(S):
                if n.startswith(".filler"):
                    os.unlink(os.path.join(S, n))
            remount(S, "size=4m")
        except Exception as e:
            return f"grow failed: {e}"
        return "space freed"
    if cmd in ("apply", "plan", "apply-converge"):
        if cmd == "plan":
            r = run(["plan", ctx.cfg, "--state-dir", S], timeout=20)
            creates = re.findall(r"# nodepool\.(\S+) will be created", r.stdout)
            if creates and os.path.isdir(S) and (inventory_pools(S) or set()) & set(creates):
                cat.fail("loss", name, "poolwright plan DIR --state-dir S",
                         f"plan proposes to create pools that exist and are in the inventory {creates}: the "
                         f"unreadable simulator state was taken for an empty fleet ({short(r.stdout.splitlines()[-1] if r.stdout.strip() else '', 100)})")
        else:
            r = run(["apply", ctx.cfg, "--state-dir", S, "--auto-approve"], timeout=60)
        check(cat, name, f"poolwright {cmd.split('-')[0]} DIR --state-dir S", r)
        if cmd == "apply-converge":
            p = run(["plan", ctx.cfg, "--state-dir", S, "--detailed-exitcode"], timeout=20)
            check(cat, name, "poolwright plan --detailed-exitcode", p)
            if r.rc != 0 or p.rc != 0:
                cat.fail("loss", name, "apply after the fault cleared",
                         f"did not converge: apply {r.describe()}, plan {p.describe()}: {short(r.stderr + p.stdout, 500)}")
            calls, bad = audit_calls(S)
            terms = [c for c in calls if c.startswith("TerminateNode(")]
            dup = [x for x, k in collections.Counter(terms).items() if k > 1]
            if dup:
                cat.fail("loss", name, "audit", f"terminated twice: {dup}")
        return f"{cmd}: {r.describe()}" + refusal(cat, name, cmd, r, expect)
    if isinstance(cmd, tuple) and cmd[0] == "apply-events":
        ev = cmd[1] if cmd[1].startswith("/") else os.path.join(ctx.aux, cmd[1])
        r = run(["apply", ctx.cfg, "--state-dir", S, "--auto-approve", "--events", ev], timeout=60)
        check(cat, name, f"poolwright apply --events {cmd[1]}", r)
        return f"apply --events: {r.describe()}" + refusal(cat, name, "apply --events", r, expect)
    if cmd == "status":
        r = run(["status", "--state-dir", S], timeout=20)
        check(cat, name, "poolwright status --state-dir S", r)
        return f"status: {r.describe()}"
    if cmd == "rollout-pause":
        r = run(["rollout", "pause", "web", "--state-dir", S], timeout=60)
        check(cat, name, "poolwright rollout pause web --state-dir S", r)
        if r.elapsed > 20 and not r.timed_out:
            cat.note(f"{name}: `rollout pause web` took {r.elapsed:.0f}s ({r.describe()})")
        return f"rollout pause: {r.describe()}"
    if cmd in ("run", "run-8s"):
        d = Daemon(ctx.cfg, S, grace=5, extra=["--retry-after", "2s"]).start()
        try:
            end = time.monotonic() + 10
            up = False
            while time.monotonic() < end and d.alive():
                r = http_exchange(("tcp", d.port), build("GET", "/healthz", port=d.port), timeout=1)
                if r["status"] is not None:
                    up = True
                    break
                time.sleep(0.2)
            if not d.alive():
                c = d.crash()
                if c:
                    cat.fail("crash", name, "poolwright run", f"{c}; stderr: {short(d.stderr(), 600)}")
                rc = d.rc()
                d.finish()
                msg = short(d.stderr().strip().splitlines()[-1] if d.stderr().strip() else "", 150)
                return f"run: exit {rc} ({msg})"
            if not up:
                cat.fail("hang", name, "poolwright run", "neither exited nor answered /healthz within 10 s")
            else:
                if cmd == "run-8s":
                    time.sleep(8)
                ok, took, last = probe_health(d.port, 5)
                if not ok:
                    cat.fail("hang", name, "GET /healthz", f"no 200 within 5 s ({last}); stderr: {short(d.stderr(), 400)}")
            ok, took, rc = d.terminate()
            if not ok:
                cat.fail("hang", name, "SIGTERM poolwright run", f"no exit within grace {d.grace}s + 5 s")
            c = d.crash()
            if c:
                cat.fail("crash", name, "poolwright run", f"{c}; stderr: {short(d.stderr(), 600)}")
            return f"run: served, SIGTERM exit {rc} in {took:.1f}s"
        finally:
            if d.alive():
                d.sigkill()
    raise ValueError(cmd)


def refusal(cat, name, cmd, r, expect):
    if expect != "refuse" or r.timed_out:
        return ""
    if r.rc == 0:
        return " (accepted; a refusal was expected)"
    if not (r.stderr.strip() or r.stdout.strip()):
        return " (refused without a message)"
    last = [l for l in r.stderr.strip().splitlines() if l.strip()]
    return f" ({short(last[-1] if last else r.stdout, 140)})"


# --------------------------------------------------------------------------
# main


def cleanup():
    for d in list(DAEMONS):
        try:
            d.sigkill()
        except Exception:
            pass
    for m in reversed(list(MOUNTS)):
        umount(m)
    if TMP_ROOT and not KEEP:
        rmtree(TMP_ROOT)


KEEP = False


def main():
    global BIN, TMP_ROOT, HOME, VERBOSE, KEEP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the poolwright binary")
    ap.add_argument("--only", help="comma-separated categories: " + ", ".join(CATEGORIES))
    ap.add_argument("--yaml-suite", default="tests/data/yaml-test-suite/cases.json")
    ap.add_argument("--kill-trials", type=int, default=80)
    ap.add_argument("--kill-budget", type=int, default=840, help="seconds at most for kill-9 (default 840)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--case", help="only cases whose name contains this (adversarial-files, disk-faults)")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    VERBOSE, KEEP = args.verbose, args.keep
    BIN = os.path.abspath(args.bin)
    if not os.access(BIN, os.X_OK):
        ap.error(f"{BIN} is not an executable")
    only = CATEGORIES
    if args.only:
        only = [c.strip() for c in args.only.split(",") if c.strip()]
        bad = [c for c in only if c not in CATEGORIES]
        if bad:
            ap.error(f"unknown categories {bad}; choose from {CATEGORIES}")
    if os.geteuid() != 0 and "disk-faults" in only:
        ap.error("disk-faults needs root (tmpfs and bind mounts)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    TMP_ROOT = tempfile.mkdtemp(prefix="poolwright-campaign-")
    HOME = os.path.join(TMP_ROOT, "home")
    os.makedirs(HOME)
    random.seed(args.seed)

    def on_signal(sig, frame):
        raise KeyboardInterrupt(f"signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    funcs = {"yaml-suite": cat_yaml_suite, "adversarial-files": cat_adversarial, "http-abuse": cat_http,
             "kill-9": cat_kill9, "disk-faults": cat_disk}
    cats = []
    try:
        for name in only:
            log(f"== {name}")
            t0 = time.monotonic()
            try:
                c = funcs[name](args)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                c = Category(name)
                c.fail("control", "campaign", name, f"the campaign itself failed: {e!r}")
                log(traceback.format_exc())
            c.notes.append(f"{time.monotonic() - t0:.0f}s")
            cats.append(c)
            log(f"== {name}: {c.cases} cases, {c.count('hang')} hangs, {c.count('crash')} crashes, "
                f"{c.count('loss')} data loss, {c.count('unauth')} unauthorised ({time.monotonic() - t0:.0f}s)")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up")
    finally:
        cleanup()
    print(f"## poolwright reliability campaign ({os.path.relpath(BIN, ROOT) if BIN.startswith(ROOT) else BIN}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    print("| category | cases | hangs | crashes | data loss | unauthorised state changes | notes |")
    print("|---|---|---|---|---|---|---|")
    for c in cats:
        notes = "; ".join(c.notes).replace("|", "\\|").replace("\n", " ")
        if c.count("control"):
            notes = f"**{c.count('control')} positive control(s) failed**; " + notes
        print(f"| {c.name} | {c.cases} | {c.count('hang')} | {c.count('crash')} | {c.count('loss')} | "
              f"{c.count('unauth')} | {notes} |")
    failing = [(c, f) for c in cats for f in c.failures]
    if failing:
        print("\n## Failing cases\n")
        order = {"crash": 0, "loss": 1, "unauth": 2, "hang": 3, "control": 4}
        for c, (kind, case, command, what) in sorted(failing, key=lambda x: (order[x[1][0]], x[0].name)):
            print(f"- **{KIND_NAMES[kind]}** [{c.name}] {case!s}: `{short(command, 200)}`: {what}")
    sys.stdout.flush()
    return 1 if any(c.failed() for c in cats) else 0


if __name__ == "__main__":
    sys.exit(main())
