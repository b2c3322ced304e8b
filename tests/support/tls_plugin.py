#!/usr/bin/env python3
"""A minimal provider plug-in behind mutual TLS, for tests (stdlib only).

    tls_plugin.py [CERT KEY CA]

CERT and KEY are the server's certificate chain and private key (PEM), CA the
bundle that client certificates must chain to; each falls back to the
environment (TLS_PLUGIN_CERT, TLS_PLUGIN_KEY, TLS_PLUGIN_CA). A client without
a certificate signed by CA is refused during the TLS handshake, before any
HTTP is read.

Environment:
  TLS_PLUGIN_TOKEN  the bearer token every request must carry (required);
                    without it, or with another, the answer is 401
                    `urn:poolwright:problem:unauthorized` (RFC 9457).
  TLS_PLUGIN_LOG    a file to which one JSON object per line is appended:
                    per request {"event": "request", "method", "path",
                    "authorization" (whether the header was there; never its
                    value), "xTeam" (the X-Team header or null), "clientCn"
                    (the client certificate's subject CN), "status"}; per
                    refused handshake {"event": "handshake-failed", "error"}.

It listens on 127.0.0.1 on a port of the kernel's choosing and prints
`LISTENING <port>` on stdout once it accepts connections. It answers the
contract (schemas/provider-plugin.openapi.yaml) only as far as a plan needs:
`GET /v1/capabilities`, and `POST /v1/describe`, where every pool asked for
is absent (it does not exist: the contract's batched answer simply leaves it
out). Every other call is 501 `unsupported`.
"""

import hmac
import json
import os
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL = "poolwright.io/plugin/v1"
PROBLEM = "urn:poolwright:problem:"
MAX_BODY = 1024 * 1024
# What a stuck or silent client may hold a thread for, in seconds.
IO_TIMEOUT = 10

CAPABILITIES = {
    "protocol": PROTOCOL,
    "name": "tls-test",
    "version": "1",
    "reimage": False,
    "describeBatchSize": 100,
    "templateFields": ["image", "instanceType"],
}


class Log:
    """One JSON object per line, appended; safe across handler threads."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def write(self, record):
        if not self.path:
            return
        line = json.dumps(record, sort_keys=True) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


def client_cn(sock):
    try:
        cert = sock.getpeercert()
    except (ValueError, OSError):
        return None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tls-plugin/1"
    timeout = IO_TIMEOUT

    def log_message(self, fmt, *args):  # stderr stays quiet; the log file says it all
        pass

    def _answer(self, status, body, content_type="application/json", extra=()):
        return (status, body, content_type, list(extra))

    def _problem(self, status, slug, title, detail, extra=()):
        return self._answer(
            status,
            {
                "type": PROBLEM + slug,
                "title": title,
                "status": status,
                "detail": detail,
            },
            content_type="application/problem+json",
            extra=extra,
        )

    def _body(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True  # the rest of the body is not read
            return None, "a Content-Length of 0 to %d bytes is required" % MAX_BODY
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"null"), None
        except ValueError as e:
            return None, "the body is not JSON: %s" % e

    def _authorized(self):
        auth = self.headers.get("Authorization")
        expected = "Bearer " + self.server.token
        return auth is not None and hmac.compare_digest(
            auth.encode("utf-8", "replace"), expected.encode()
        )

    def _handle(self):
        """The answer to this request, as (status, body, content type, headers)."""
        path = self.path.split("?", 1)[0]
        # The body is read whatever the answer, so a kept-alive connection
        # stays in step.
        body, body_error = self._body()
        if not self._authorized():
            return self._problem(
                401,
                "unauthorized",
                "Unauthorized",
                "a valid bearer token is required",
                extra=[("WWW-Authenticate", 'Bearer realm="tls-plugin"')],
            )
        if self.command == "GET" and path == "/v1/capabilities":
            return self._answer(200, CAPABILITIES)
        if self.command == "POST" and path == "/v1/describe":
            if body_error is not None:
                return self._problem(400, "invalid", "Invalid request", body_error)
            pools = body.get("pools") if isinstance(body, dict) else None
            if (
                not isinstance(pools, list)
                or not 1 <= len(pools) <= CAPABILITIES["describeBatchSize"]
                or not all(isinstance(p, str) for p in pools)
            ):
                return self._problem(
                    422,
                    "invalid",
                    "Invalid request",
                    "pools must be a list of 1 to %d pool names"
                    % CAPABILITIES["describeBatchSize"],
                )
            # No pool exists here: each one asked for is absent from the answer.
            return self._answer(200, {"pools": []})
        return self._problem(
            501,
            "unsupported",
            "Not supported",
            "this test plug-in answers only GET /v1/capabilities and POST /v1/describe",
        )

    def _serve(self):
        status, body, content_type, extra = self._handle()
        # Logged before answering: once the client has its answer, the log says so.
        self.server.log.write(
            {
                "event": "request",
                "method": self.command,
                "path": self.path,
                "authorization": self.headers.get("Authorization") is not None,
                "xTeam": self.headers.get("X-Team"),
                "clientCn": client_cn(self.connection),
                "status": status,
            }
        )
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context, token, log):
        self.context = context
        self.token = token
        self.log = log
        super().__init__(("127.0.0.1", 0), Handler)

    def finish_request(self, request, client_address):
        # In the connection's own thread (not the accept loop): the handshake.
        request.settimeout(IO_TIMEOUT)
        tls = self.context.wrap_socket(
            request, server_side=True, do_handshake_on_connect=False
        )
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as e:
            self.log.write({"event": "handshake-failed", "error": str(e)})
            linger(tls)
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            tls.close()

    def shutdown_request(self, request):
        # The socket was handed to TLS (and closed there): nothing left to close.
        pass


def linger(tls):
    """Close a connection whose handshake failed so that the client reads the
    TLS alert, not a reset: stop writing, read what the client still sends
    (with TLS 1.3 a client may already have sent its request), then close."""
    try:
        tls.shutdown(socket.SHUT_WR)  # also drops the TLS layer: plain reads follow
        tls.settimeout(2)
        while tls.recv(65536):
            pass
    except OSError:
        pass
    finally:
        tls.close()


def main(argv):
    args = argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(args) not in (0, 3):
        print("usage: tls_plugin.py [CERT KEY CA]", file=sys.stderr)
        return 2
    cert, key, ca = args or (
        os.environ.get("TLS_PLUGIN_CERT"),
        os.environ.get("TLS_PLUGIN_KEY"),
        os.environ.get("TLS_PLUGIN_CA"),
    )
    if not (cert and key and ca):
        print(
            "tls_plugin.py: give CERT KEY CA, or set TLS_PLUGIN_CERT, TLS_PLUGIN_KEY and TLS_PLUGIN_CA",
            file=sys.stderr,
        )
        return 2
    token = (os.environ.get("TLS_PLUGIN_TOKEN") or "").strip()
    if not token:
        print("tls_plugin.py: TLS_PLUGIN_TOKEN must be set", file=sys.stderr)
        return 2

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cafile=ca)
    context.verify_mode = ssl.CERT_REQUIRED  # no certificate, no handshake
    context.set_alpn_protocols(["http/1.1"])

    server = Server(context, token, Log(os.environ.get("TLS_PLUGIN_LOG")))
    print("LISTENING %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
