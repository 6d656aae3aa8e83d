"""Open a page in a real headless Chromium and report what a user's browser would show: console
messages, uncaught errors, failed loads, every request made, and whether each picture loaded.

Chromium is driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages
separated by NUL bytes on file descriptors 3 and 4), so the test needs no websocket client, driver
or network port.  ``find_browser()`` returns None where no Chromium is installed (the tests then skip;
``.ci/run`` installs Debian's ``chromium``).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> Optional[str]:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@dataclass
class PageVisit:
    """What opening a page gave.  ``images``: per <img> [src (first 40 chars), complete, naturalWidth];
    ``requests``: every URL the page asked for; ``console``: (level, text) of console calls and log
    entries; ``exceptions``: uncaught script errors; ``failed``: loads that failed."""
    title: str = ""
    text: str = ""  # as shown (innerText: not what a closed <details> hides)
    all_text: str = ""  # textContent, hidden parts included
    images: List[list] = field(default_factory=list)
    requests: List[str] = field(default_factory=list)
    console: List[tuple] = field(default_factory=list)
    exceptions: List[str] = field(default_factory=list)
    failed: List[str] = field(default_factory=list)
    screenshot: bytes = b""

    @property
    def errors(self) -> List[str]:
        return ([f"{lvl}: {t}" for lvl, t in self.console if lvl in ("error", "assert")] + self.exceptions
                + [f"failed: {u}" for u in self.failed])


class _Pipe:
    def __init__(self, proc, to_browser: int, from_browser: int):
        self.proc, self.out, self.inp = proc, to_browser, from_browser
        self.buf, self.next_id, self.events = b"", 0, []

    def send(self, method: str, params: Optional[dict] = None, session: Optional[str] = None) -> int:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def _read(self, deadline: float) -> Optional[dict]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                return None
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its DevTools pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: Optional[dict] = None, session: Optional[str] = None,
             timeout: float = 30) -> dict:
        want = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._read(deadline)
            if msg is None:
                raise TimeoutError(f"no answer to {method} in {timeout} s")
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for k, ev in enumerate(self.events):
            if ev["method"] == method:
                return self.events.pop(k)
        while True:
            msg = self._read(deadline)
            if msg is None:
                raise TimeoutError(f"no {method} in {timeout} s")
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self.events.append(msg)


def _high(fd: int) -> int:
    """``fd`` moved to a number above 9 (close-on-exec), so putting one pipe end on 3 or 4 in the child
    never overwrites the other."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def visit(browser: str, page: Path, timeout: float = 60, width: int = 1280, height: int = 2000) -> PageVisit:
    """Open ``page`` (a local file) in headless ``browser``; gather what it showed and asked for."""
    to_r, to_w = map(_high, os.pipe())  # we write commands, the browser reads fd 3
    from_r, from_w = map(_high, os.pipe())  # the browser writes fd 4, we read
    profile = tempfile.mkdtemp(prefix="yolo_data-browser-")

    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--disable-extensions", f"--user-data-dir={profile}", "about:blank"]
    def onto_3_and_4():  # in the child: the descriptors Chromium reads (3) and writes (4); dup2 makes
        os.dup2(to_r, 3)  # them inheritable, while every other descriptor of ours is close-on-exec
        os.dup2(from_w, 4)

    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=onto_3_and_4, close_fds=False)
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(proc, to_w, from_r)
    out = PageVisit()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.call(f"{domain}.enable", session=session)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        pipe.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout)
        probe = ("JSON.stringify({title: document.title, text: document.body.innerText, all_text: document.body.textContent,"
                 " images: Array.from(document.images).map(i => [i.src.slice(0, 40), i.complete, i.naturalWidth])})")
        value = pipe.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
        seen = json.loads(value["result"]["value"])
        out.title, out.text, out.all_text, out.images = seen["title"], seen["text"], seen["all_text"], seen["images"]
        shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session, timeout=timeout)
        out.screenshot = base64.b64decode(shot["data"])
        for ev in pipe.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Network.requestWillBeSent":
                out.requests.append(p["request"]["url"])
            elif m == "Network.loadingFailed":
                out.failed.append(f"{p.get('errorText')} ({p.get('requestId')})")
            elif m == "Runtime.consoleAPICalled":
                out.console.append((p["type"], " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])))
            elif m == "Runtime.exceptionThrown":
                out.exceptions.append(p["exceptionDetails"].get("text", "exception"))
            elif m == "Log.entryAdded":
                out.console.append((p["entry"]["level"], p["entry"]["text"]))
        pipe.call("Browser.close")
    finally:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(to_w)
        os.close(from_r)
        shutil.rmtree(profile, ignore_errors=True)
    return out
