"""A fault-injecting HTTP/1.1 reverse proxy for S3 tests and benchmarks.

It sits between an S3 client (minio-py, boto3, urllib3 with presigned URLs)
and a real S3 server (the ``s3_server`` fixture, tests/s3server.py) and makes
the failures a loader meets on real object stores happen on demand:
throttling, 5xx errors, dropped connections, stalled responses and network
latency. Everything else passes through byte for byte, the ``Host`` header
included: SigV4 signs it, and the server checks the signature, so a proxy that
rewrote it would turn every request into SignatureDoesNotMatch.

Standard library only, so a benchmark can import it without pytest. Use the
``fault_proxy`` fixture (import it into the test module next to
``s3_server``), or::

    with FaultProxy(srv.endpoint_url) as proxy:
        proxy.faults.latency_s = 0.02
        proxy.faults.throttle(times=2, method="GET", path=r"^/bucket/images/")
        ...  # point the client at proxy.endpoint_url
        print(proxy.requests, proxy.counts, proxy.faults_served)

Faults are changed from any thread while requests run; each rule applies to
the next ``times`` requests that match its method and regexes, the first
matching rule with budget left winning.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import re
import select
import socket
import struct
import threading
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus

ACTIONS = ("throttle", "error", "cut", "reset", "stall")

_BUF = 64 * 1024
_MAX_HEAD = 64 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_MESSAGES = {"InternalError": "We encountered an internal error. Please try again.",
             "SlowDown": "Please reduce your request rate.",
             "ServiceUnavailable": "Please reduce your request rate."}


class _Broken(Exception):
    """A peer closed mid-message or sent something that is not HTTP/1.1: the
    connection cannot be used any further."""


class _Stop(Exception):
    """The cut fault has sent the bytes it lets through."""


@dataclass
class Rule:
    """One fault, applied to the next ``times`` matching requests (``None``:
    every matching request until the rule is removed).

    ``method`` matches the HTTP method exactly (case-insensitive); ``path`` and
    ``query`` are regexes searched in the request path (as sent, so
    percent-encoded, before ``?``) and in the raw query string. Unset means any.
    """
    action: str
    times: int | None = 1
    method: str | None = None
    path: str | None = None
    query: str | None = None
    # error: the status, and the S3 error code of the XML body (None: a plain
    # text body, as a load balancer in front of S3 sends with its 502/504).
    status: int = 500
    code: str | None = "InternalError"
    message: str | None = None  # the XML's Message; None: one to go with the code
    # cut: body bytes let through before the connection is closed.
    after_bytes: int = 0
    # stall: how long the connection is held; whether the response's status
    # line and headers get through first (then the body stalls).
    stall_s: float = 30.0
    send_headers: bool = False
    served: int = 0
    _path_re: re.Pattern | None = field(default=None, init=False, repr=False)
    _query_re: re.Pattern | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise ValueError("action must be one of %s, not %r" % (ACTIONS, self.action))
        if self.times is not None and self.times < 0:
            raise ValueError("times must be >= 0 or None")
        self.method = self.method.upper() if self.method else None
        self._path_re = re.compile(self.path) if self.path is not None else None
        self._query_re = re.compile(self.query) if self.query is not None else None

    @property
    def remaining(self) -> int | None:
        return None if self.times is None else self.times - self.served

    def matches(self, method: str, path: str, query: str) -> bool:
        return ((self.method is None or self.method == method)
                and (self._path_re is None or self._path_re.search(path) is not None)
                and (self._query_re is None or self._query_re.search(query) is not None))


class Faults:
    """The proxy's fault settings; every method is safe to call from any
    thread while requests are in flight."""

    def __init__(self, latency_s: float = 0.0):
        self._lock = threading.Lock()
        self._latency_s = float(latency_s)
        self._rules: list[Rule] = []

    @property
    def latency_s(self) -> float:
        """Delay before each request is handled (faulted ones too), as the
        round trip to a remote object store adds: with it, a loader that
        fetches images one at a time shows what it would cost in a data
        centre rather than on 127.0.0.1."""
        with self._lock:
            return self._latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        if value < 0:
            raise ValueError("latency_s must be >= 0")
        with self._lock:
            self._latency_s = float(value)

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            with contextlib.suppress(ValueError):
                self._rules.remove(rule)

    def clear(self) -> None:
        """Drop every rule (latency stays)."""
        with self._lock:
            self._rules.clear()

    def throttle(self, times: int | None = 1, method: str | None = None,
                 path: str | None = None, query: str | None = None) -> Rule:
        """Answer 503 SlowDown without forwarding, as S3 does when a prefix
        gets more requests per second than it serves; clients are expected to
        back off and retry."""
        return self.add(Rule("throttle", times, method, path, query, status=503, code="SlowDown"))

    def error(self, times: int | None = 1, method: str | None = None, path: str | None = None,
              query: str | None = None, status: int = 500, code: str | None = "InternalError",
              message: str | None = None) -> Rule:
        """Answer ``status`` without forwarding: by default S3's 500
        InternalError, a transient server fault worth a retry; with
        ``code=None`` a body that is not S3 XML, as a 502/504 from a load
        balancer or gateway in front of the store."""
        return self.add(Rule("error", times, method, path, query, status=status, code=code,
                             message=message))

    def cut(self, times: int | None = 1, method: str | None = None, path: str | None = None,
            query: str | None = None, after_bytes: int = 0) -> Rule:
        """Forward, pass the response's headers and its first ``after_bytes``
        body bytes, then close the connection: a connection dropped mid-download
        (a peer or middlebox dying, an idle timeout). The client sees a short
        body (IncompleteRead / ProtocolError), the error a reader must retry
        rather than take as the object's content. A response without a body
        (HEAD, 204) gets through whole; only its connection is closed."""
        return self.add(Rule("cut", times, method, path, query, after_bytes=after_bytes))

    def reset(self, times: int | None = 1, method: str | None = None, path: str | None = None,
              query: str | None = None) -> Rule:
        """Close the connection with a TCP RST once the request's headers are
        read, nothing forwarded and no response: a server or load balancer
        dropping a (kept-alive) connection, seen as ECONNRESET."""
        return self.add(Rule("reset", times, method, path, query))

    def stall(self, times: int | None = 1, method: str | None = None, path: str | None = None,
              query: str | None = None, stall_s: float = 30.0, send_headers: bool = False) -> Rule:
        """Forward, then hold the connection open for ``stall_s`` seconds with
        nothing (or, with ``send_headers``, only the status line and headers)
        sent, then close it: a hung server or a lost response. Only a client
        read timeout gets the caller out; without one a loader worker hangs."""
        return self.add(Rule("stall", times, method, path, query, stall_s=stall_s,
                             send_headers=send_headers))

    def _take(self, method: str, path: str, query: str) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if (rule.times is None or rule.served < rule.times) and rule.matches(method, path, query):
                    rule.served += 1
                    return rule
        return None


@dataclass
class _Message:
    head: bytes
    version: str
    headers: dict  # lower-case name -> value (repeated headers joined by ", ")
    # request
    method: str = ""
    path: str = ""
    query: str = ""
    # response
    status: int = 0

    def header_has(self, name: str, token: str) -> bool:
        return token in [t.strip().lower() for t in self.headers.get(name, "").split(",")]

    @property
    def wants_close(self) -> bool:
        if self.header_has("connection", "close"):
            return True
        return self.version == "HTTP/1.0" and not self.header_has("connection", "keep-alive")


def _parse_head(head: bytes, request: bool) -> _Message:
    try:
        lines = head.decode("latin-1").split("\r\n")
        first = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = headers[name] + ", " + value if name in headers else value
        if request:
            method, target, version = first
            path, _, query = target.partition("?")
            return _Message(head, version, headers, method=method.upper(), path=path, query=query)
        version, status = first[0], int(first[1])
        return _Message(head, version, headers, status=status)
    except (ValueError, IndexError) as e:
        raise _Broken("not an HTTP/1.1 message head: %r" % head[:200]) from e


def _framing(msg: _Message, request_method: str | None = None):
    """How the body after ``msg``'s head ends: ("none",), ("length", n),
    ("chunked",) or ("close",) (a response read until the server closes)."""
    if request_method is not None:
        if request_method == "HEAD" or 100 <= msg.status < 200 or msg.status in (204, 304):
            return ("none",)
    if msg.header_has("transfer-encoding", "chunked"):
        return ("chunked",)
    if "content-length" in msg.headers:
        try:
            n = int(msg.headers["content-length"].split(",")[0])
        except ValueError as e:
            raise _Broken("bad Content-Length %r" % msg.headers["content-length"]) from e
        return ("length", n) if n > 0 else ("none",)
    return ("none",) if request_method is None else ("close",)


class _Peer:
    """One side's socket with a read buffer: heads and chunk-size lines are
    read whole, bodies are passed on in pieces as they arrive."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> bool:
        data = self.sock.recv(_BUF)
        if not data:
            return False
        self.buf += data
        return True

    def read_head(self) -> bytes | None:
        """The next message head, or None when the peer closed cleanly
        between messages."""
        while True:
            # RFC 9112 2.2: a server should ignore empty lines before a request line.
            while self.buf[:2] == b"\r\n":
                del self.buf[:2]
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = bytes(self.buf[:i + 4])
                del self.buf[:i + 4]
                return head
            if len(self.buf) > _MAX_HEAD:
                raise _Broken("message head over %d bytes" % _MAX_HEAD)
            if not self._fill():
                if self.buf:
                    raise _Broken("connection closed mid-head")
                return None

    def read_line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i + 2])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > _MAX_HEAD or not self._fill():
                raise _Broken("connection closed mid-chunk")

    def pieces(self, n: int | None):
        """Up to ``n`` bytes (None: until the peer closes) in pieces as they come."""
        while n is None or n > 0:
            if not self.buf and not self._fill():
                if n is None:
                    return
                raise _Broken("connection closed with %d body bytes to come" % n)
            take = len(self.buf) if n is None else min(n, len(self.buf))
            piece = bytes(self.buf[:take])
            del self.buf[:take]
            if n is not None:
                n -= take
            yield piece


def _relay_body(src: _Peer, framing, send) -> None:
    """Pass one message body from ``src`` to ``send`` unchanged, framing
    included (chunk sizes, extensions and trailers of a chunked body as well)."""
    kind = framing[0]
    if kind == "none":
        return
    if kind in ("length", "close"):
        for piece in src.pieces(framing[1] if kind == "length" else None):
            send(piece)
        return
    while True:  # chunked
        line = src.read_line()
        send(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as e:
            raise _Broken("bad chunk size line %r" % line[:100]) from e
        if size == 0:
            while True:  # trailer fields, up to the empty line
                line = src.read_line()
                send(line)
                if line == b"\r\n":
                    return
        for piece in src.pieces(size + 2):  # the chunk's data and its CRLF
            send(piece)


def _discard(_data: bytes) -> None:
    pass


class FaultProxy:
    """A reverse proxy to ``upstream`` (e.g. ``http://127.0.0.1:8333``) on
    127.0.0.1 at a port the kernel picks, with the faults in :attr:`faults`.

    One thread per client connection; each keeps its own upstream connection
    alive across requests, so a client's connection reuse carries through to
    the server. Counters: :attr:`requests` (every request received, faulted
    ones included), :attr:`counts` per (method, path), :attr:`faults_served`
    per action, :attr:`connections` accepted; :meth:`reset_counts` zeroes them.
    """

    def __init__(self, upstream: str, latency_s: float = 0.0, upstream_timeout_s: float = 120.0):
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("upstream must be http://host[:port], not %r" % upstream)
        self.upstream = upstream
        self._upstream_addr = (u.hostname, u.port or 80)
        self._upstream_timeout_s = upstream_timeout_s
        self.faults = Faults(latency_s)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._socks: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._ids = itertools.count(1)
        self._requests = 0
        self._connections = 0
        self._counts: collections.Counter = collections.Counter()
        self._faults_served: collections.Counter = collections.Counter()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        # A short accept timeout lets close() stop the accept loop on any platform.
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name="faultproxy-accept-%d" % self.port)
        self._acceptor.start()

    # -- public ------------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    @property
    def netloc(self) -> str:
        """``127.0.0.1:PORT``, the endpoint form minio-py takes."""
        return "127.0.0.1:%d" % self.port

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    @property
    def counts(self) -> collections.Counter:
        """A copy: {(method, path): requests}."""
        with self._lock:
            return collections.Counter(self._counts)

    @property
    def faults_served(self) -> collections.Counter:
        """A copy: {action: requests that got it}; ``sum(...values())`` for all."""
        with self._lock:
            return collections.Counter(self._faults_served)

    def reset_counts(self) -> None:
        with self._lock:
            self._requests = 0
            self._connections = 0
            self._counts.clear()
            self._faults_served.clear()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, end every connection (stalled ones too) and wait
        for the proxy's threads to finish."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._acceptor.join(timeout)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            # shutdown wakes a thread blocked in recv on the socket; the thread closes it.
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)
        with self._lock:
            leftover, self._socks = list(self._socks), set()
        for s in leftover:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "FaultProxy(%s -> %s)" % (self.endpoint_url, self.upstream)

    # -- sockets and threads -------------------------------------------------------------
    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closing.is_set():
                return False
            self._socks.add(sock)
            return True

    def _release(self, sock: socket.socket | None, rst: bool = False) -> None:
        if sock is None:
            return
        with self._lock:
            self._socks.discard(sock)
        with contextlib.suppress(OSError):
            if rst:
                # Linger on with a zero timeout: close() sends RST, not FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            sock.close()

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._track(sock):
                sock.close()
                return
            with self._lock:
                self._connections += 1
            t = threading.Thread(target=self._serve, args=(sock,), daemon=True,
                                 name="faultproxy-conn-%d" % self.port)
            with self._lock:
                self._threads.add(t)
            t.start()

    def _serve(self, sock: socket.socket) -> None:
        conn = _Connection(self, sock)
        try:
            conn.run()
        except (OSError, _Broken):
            pass  # a peer went away or spoke garbage: this connection ends
        finally:
            conn.close()
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _counted(self, req: _Message) -> None:
        with self._lock:
            self._requests += 1
            self._counts[(req.method, req.path)] += 1

    def _fault_counted(self, action: str) -> None:
        with self._lock:
            self._faults_served[action] += 1


class _Connection:
    """One client connection and the upstream connection that serves it."""

    def __init__(self, proxy: FaultProxy, sock: socket.socket):
        self.proxy = proxy
        self.client = _Peer(sock)
        self.up: _Peer | None = None
        self.rst = False

    def close(self) -> None:
        self._close_upstream()
        self.proxy._release(self.client.sock, rst=self.rst)

    def _close_upstream(self) -> None:
        if self.up is not None:
            self.proxy._release(self.up.sock)
            self.up = None

    def _upstream(self) -> tuple[_Peer, bool]:
        """The upstream connection and whether it is a reused one. A kept-alive
        connection the server has closed meanwhile reads as readable (EOF), so
        it is replaced before a request is sent on it."""
        if self.up is not None:
            readable, _, _ = select.select([self.up.sock], [], [], 0)
            if not readable:
                return self.up, True
            self._close_upstream()
        sock = socket.create_connection(self.proxy._upstream_addr, timeout=self.proxy._upstream_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.proxy._track(sock):
            sock.close()
            raise _Broken("proxy closing")
        self.up = _Peer(sock)
        return self.up, False

    def run(self) -> None:
        closing = self.proxy._closing
        while not closing.is_set():
            head = self.client.read_head()
            if head is None:
                return
            req = _parse_head(head, request=True)
            self.proxy._counted(req)
            latency = self.proxy.faults.latency_s
            if latency > 0 and closing.wait(latency):
                return
            rule = self.proxy.faults._take(req.method, req.path, req.query)
            if rule is not None:
                self.proxy._fault_counted(rule.action)
            if not self._handle(req, rule) or req.wants_close:
                return

    def _handle(self, req: _Message, rule: Rule | None) -> bool:
        """Serve one request; False when the client connection must end."""
        action = rule.action if rule is not None else "forward"
        body = _framing(req)
        expects_continue = req.header_has("expect", "100-continue")
        if action == "reset":
            self.rst = True
            return False
        if action in ("throttle", "error"):
            keep = True
            if body[0] != "none":
                if expects_continue:
                    # The client sends the body only after a 100 Continue, which it
                    # will not get: answer now and close rather than wait for it.
                    keep = False
                else:
                    _relay_body(self.client, body, _discard)
            self._answer(req, rule, keep)
            if not keep:
                self._linger_close()
            return keep

        # forward, cut, stall
        if expects_continue and body[0] != "none":
            # Answer 100 ourselves and take the body now; the server's own 100
            # (it sees the same Expect header) is then not passed on.
            self.client.sock.sendall(_CONTINUE)
        up, reused = self._upstream()
        up.sock.sendall(req.head)
        _relay_body(self.client, body, up.sock.sendall)
        if action == "stall" and not rule.send_headers:
            self._stall(rule.stall_s)
            return False
        resp_head = self._response_head(up, expects_continue)
        if resp_head is None and reused and body[0] == "none":
            # The server closed the kept-alive connection as the request went
            # out; nothing reached it, so sending again on a fresh one is safe.
            self._close_upstream()
            up, _ = self._upstream()
            up.sock.sendall(req.head)
            resp_head = self._response_head(up, expects_continue)
        if resp_head is None:
            raise _Broken("upstream closed without a response")
        resp = _parse_head(resp_head, request=False)
        self.client.sock.sendall(resp_head)
        if action == "stall":
            self._stall(rule.stall_s)
            return False
        framing = _framing(resp, req.method)
        if action == "cut":
            self._cut(up, framing, rule.after_bytes)
            return False
        _relay_body(up, framing, self.client.sock.sendall)
        if framing[0] == "close" or resp.wants_close or req.wants_close:
            self._close_upstream()
            return False
        return True

    def _response_head(self, up: _Peer, swallow_continue: bool) -> bytes | None:
        """The final response head from upstream; interim 1xx responses are
        passed to the client, except a 100 Continue already sent to it."""
        while True:
            head = up.read_head()
            if head is None:
                return None
            resp = _parse_head(head, request=False)
            if not 100 <= resp.status < 200 or resp.status == 101:
                return head
            if not (resp.status == 100 and swallow_continue):
                self.client.sock.sendall(head)

    def _answer(self, req: _Message, rule: Rule, keep: bool) -> None:
        status = rule.status
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Error"
        rid = "faultproxy-%d" % next(self.proxy._ids)
        if rule.code is not None:
            message = rule.message or _MESSAGES.get(rule.code, "%s (injected by faultproxy)" % rule.code)
            body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
                    '<Resource>%s</Resource><RequestId>%s</RequestId></Error>'
                    % (rule.code, _xml_escape(message), _xml_escape(req.path), rid)).encode()
            ctype = "application/xml"
        else:
            body = ("%d %s\n" % (status, reason)).encode()
            ctype = "text/plain"
        lines = ["HTTP/1.1 %d %s" % (status, reason),
                 "Content-Type: %s" % ctype,
                 "Content-Length: %d" % len(body),
                 "x-amz-request-id: %s" % rid,
                 "Server: faultproxy"]
        if not keep or req.wants_close:
            lines.append("Connection: close")
        if req.method == "HEAD":
            body = b""  # a HEAD response carries no body, whatever Content-Length says
        self.client.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _linger_close(self) -> None:
        """Close after an answer sent while the client may still be sending a
        body: stop writing, read briefly what still arrives, then close. An
        immediate close with unread data would send RST, which can destroy the
        answer before the client reads it."""
        sock = self.client.sock
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(1.0)
            while sock.recv(_BUF):
                pass

    def _cut(self, up: _Peer, framing, after_bytes: int) -> None:
        left = after_bytes

        def send(data: bytes) -> None:
            nonlocal left
            if left <= 0:
                raise _Stop
            take = data[:left]
            self.client.sock.sendall(take)
            left -= len(take)
            if left <= 0:
                raise _Stop

        with contextlib.suppress(_Stop):
            if left <= 0:
                raise _Stop
            _relay_body(up, framing, send)
        # The response was not read to its end: this upstream connection is unusable too.
        self._close_upstream()

    def _stall(self, seconds: float) -> None:
        self.proxy._closing.wait(seconds)
        self._close_upstream()


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


try:
    import pytest
except ImportError:  # a benchmark imports this module without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture
    def fault_proxy(s3_server):
        """A :class:`FaultProxy` in front of the session's ``s3_server``, with
        no faults set; closed after the test (a test module imports both
        fixtures)."""
        with FaultProxy(s3_server.endpoint_url) as proxy:
            yield proxy
