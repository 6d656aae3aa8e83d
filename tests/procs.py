"""Processes in the tests: every process a test starts is bounded by a timeout and ended, with everything
it started, however the test ends; a test waits for an event it can name (a call made in a worker, an
answer on a pipe), never for a span of time, so its verdict does not depend on the machine's speed.

* ``run_all`` / ``popen_all``: a command, and every process it started (torchrun's ranks in sessions of
  their own, their DataLoader workers), ended when the command returns, times out or the test stops;
  the sweep is tools/proctree.py's, which the benchmarks use too.
* ``ended``: the same for processes forked from the test process (multiprocessing, torch's
  start_processes); ``in_child``: a function in a forked child (optionally as another user), answered
  within a timeout; ``received``: a pipe's answer within a timeout.
* ``count_calls``: how often a function ran here and in the processes forked after the patch (the
  loader's workers), and a bounded wait until it ran n times.
* ``SessionWatch``: what the test run left behind at its end (processes, /dev/shm), for conftest.py.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_proctree():
    """tools/proctree.py, by its path (tools/ is not put on sys.path); one module object with the one
    benchmarks/common.py imports when a test runs a benchmark in this process."""
    if "proctree" not in sys.modules:
        spec = importlib.util.spec_from_file_location("proctree", ROOT / "tools" / "proctree.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["proctree"] = module
        spec.loader.exec_module(module)
    return sys.modules["proctree"]


proctree = _load_proctree()
alive, as_text, descendants, run_tree = proctree.alive, proctree.as_text, proctree.descendants, proctree.run_tree
KILLED_S = proctree.SWEEP_S  # how long processes get to be gone after SIGKILL before it is an error


# -- commands ---------------------------------------------------------------------------------------
def _overran(e: subprocess.TimeoutExpired, tail: int = 4000):
    out, err = as_text(e.stdout), as_text(e.stderr)
    pytest.fail(f"{e.cmd} still running after {e.timeout} s; it and every process it started were killed. "
                f"Output so far:\n--- stdout ---\n{out[-tail:]}\n--- stderr ---\n{err[-tail:]}", pytrace=False)


def run_all(cmd, timeout: float, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, timeout=timeout, **kw)`` that ends every process the command started, and
    fails the test with the output so far when the command outlives ``timeout``."""
    try:
        return proctree.run_tree(cmd, timeout, **kw)
    except subprocess.TimeoutExpired as e:
        _overran(e)


@contextlib.contextmanager
def popen_all(cmd, **kw):
    """``subprocess.Popen(cmd, **kw)`` for a with-block: on leaving it, the command and every process it
    started are ended; a TimeoutExpired out of the block (``communicate(timeout=...)``) fails the test
    with the output so far."""
    try:
        with proctree.popen_tree(cmd, **kw) as proc:
            yield proc
    except subprocess.TimeoutExpired as e:
        _overran(e)


# -- processes forked from the test process --------------------------------------------------------
@contextlib.contextmanager
def ended(processes):
    """For processes forked from the test process itself (multiprocessing, torch's start_processes),
    which inherit no marker /proc can show (a fork's /proc/<pid>/environ is the environment its program
    was started with): on leaving, those still alive are killed together with their descendants (a
    rank's DataLoader workers), found while they are still children, and joined.  Workers of a process
    that had already died are no longer below it: yolo_data's workers end themselves when their parent
    is gone (yolo_data.runtime.workers)."""
    try:
        yield processes
    finally:
        running = [p.pid for p in processes if p.pid is not None and p.is_alive()]
        doomed = running + [d for pid in running for d in descendants(pid)]
        try:
            proctree.kill_all(doomed, KILLED_S)
        finally:
            for p in processes:
                if p.pid is not None:
                    p.join(KILLED_S)


def received(conn, timeout: float, what: str = "answer"):
    """``conn.recv()`` of a multiprocessing pipe, failing the test when nothing comes within ``timeout``
    seconds or the other end closed without sending (its process died)."""
    if not conn.poll(timeout):
        pytest.fail(f"no {what} within {timeout:.0f} s", pytrace=False)
    try:
        return conn.recv()
    except EOFError:
        pytest.fail(f"no {what}: the process that was to send it ended first", pytrace=False)


def in_child(fn: Callable, *args, timeout: float = 120, user: Optional[int] = None):
    """``fn(*args)`` in a forked child, as uid and gid ``user`` when given; returns what it returns, or
    ``"error: <repr>"`` of what it raised.  The child is killed and reaped when the answer does not come
    within ``timeout`` seconds (the test fails), or when it lingers after answering."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child():
        try:
            if user is not None:
                os.setgid(user)
                os.setuid(user)
            send.send(fn(*args))
        except BaseException as e:  # an answer, so that the parent does not wait for nothing
            send.send(f"error: {e!r}")

    p = ctx.Process(target=child)
    with ended([p]):
        p.start()
        send.close()  # the child holds the only writing end: its death reads as the end of the pipe
        return received(receive, timeout, f"answer from {getattr(fn, '__name__', fn)} in a forked child")


def as_nobody(fn, *args, timeout: float = 120):
    """``in_child(fn, *args)`` as user nobody (tests of what other users can do).  Skips where this
    process cannot switch users (not root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user")
    return in_child(fn, *args, timeout=timeout, user=65534)


@contextlib.contextmanager
def shared_folder():
    """(base, shared): a temp folder user nobody can enter, and in it a folder every user may write
    with the sticky bit (as /tmp), where a cache_dir may point (tests of what another user can plant)."""
    base = Path(tempfile.mkdtemp(prefix="yolo_data_shared_"))
    os.chmod(base, 0o755)
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    try:
        yield base, shared
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Overran(Exception):
    """Not an OSError (as TimeoutError is): os.walk swallows those, so the limit would never show."""


@contextlib.contextmanager
def hard_limit(seconds: int):
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""
    def expire(signum, frame):
        raise Overran(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- events in the loader's workers -----------------------------------------------------------------
class Calls:
    """A count that this process and every process forked after it add to (shared memory), and a wait
    for it to reach n that fails the test after a timeout instead of hanging."""

    def __init__(self):
        ctx = mp.get_context("fork")
        self._count = ctx.Value("q", 0)
        self._ran = ctx.Semaphore(0)

    @property
    def count(self) -> int:
        return self._count.value

    def add(self, k: int = 1) -> None:
        with self._count.get_lock():
            self._count.value += k
        for _ in range(k):
            self._ran.release()

    def wait(self, n: int, timeout: float, what: str = "calls") -> None:
        """Until the count is at least ``n``: returns as soon as it is, fails the test when it still is
        not after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.count < n:
            if not self._ran.acquire(timeout=max(0.0, deadline - time.monotonic())):
                pytest.fail(f"{what}: {self.count} of {n} after {timeout:.0f} s", pytrace=False)


def count_calls(monkeypatch, owner, name: str, amount: Callable[[object], int] = None) -> Calls:
    """Patch ``owner.name`` (a function or method) to count its calls, or ``amount(result)`` per call,
    in this process and in the processes forked after the patch (a loader's workers).  The count is
    added when the call returns."""
    calls = Calls()
    real = getattr(owner, name)

    @functools.wraps(real)
    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.add(1 if amount is None else int(amount(out)))
        return out

    monkeypatch.setattr(owner, name, counted)
    return calls


# -- looking for leftovers without proctree (tests of the sweep itself) -----------------------------
def tagged_env():
    """(name, os.environ plus that variable): a tag of the test's own, found by ``holding``."""
    tag = f"YOLO_DATA_TEST_TAG_{uuid.uuid4().hex}"
    return tag, dict(os.environ, **{tag: "1"})


def holding(var: str) -> List[int]:
    """Live processes whose environment holds ``var``, read here rather than through proctree."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if (var + "=").encode() in f.read():
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return [p for p in found if alive(p)]


# -- what the whole run left behind ----------------------------------------------------------------
SHM = Path("/dev/shm")
# processes the interpreter or torch start once and end at exit, not per test
SERVICES = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "torch_shm_manager")
TORCH_SHM_NAME = re.compile(r"torch_(\d+)_")  # torch's shared memory: /dev/shm/torch_<maker's pid>_...


@dataclass
class Leftovers:
    """What a test run left behind (``SessionWatch.leftovers``): ``processes`` ('pid (parent ppid):
    command line') and ``shm`` (names in /dev/shm) are the run's own and fail it; ``pending`` are the
    run's torch buffers that its torch_shm_manager removes when this process ends; ``other`` are new
    entries of /dev/shm that no process of the run is known to have made."""
    processes: List[str]
    shm: List[str]
    pending: List[str]
    other: List[str]


def _start_time(pid) -> Optional[str]:
    """The start time of ``pid`` (clock ticks since boot): with the pid, one process and not a reuse."""
    return proctree.stat_field(pid, 19)


class SessionWatch:
    """What the test run started, to name what it left running or in /dev/shm at its end.

    Three ways to a process of the run: below the pytest process; marked by a variable put in
    os.environ at the start, which every command started since inherits (torchrun's ranks in sessions
    of their own, and processes reparented to init once their parent died); or forked from this
    interpreter or its forks (DataLoader workers, their children), which write their pid to a log at the
    fork.  An entry of /dev/shm is the run's when it is new and named after a process forked here (torch
    names its shared memory after the maker's pid); other new entries are counted, not blamed (another
    run on this machine may have made them), and nothing in /dev/shm is removed."""

    def __init__(self, shm: Path = SHM):
        self.mark = f"{proctree.RUN_MARK}TESTS_{uuid.uuid4().hex}"
        os.environ[self.mark] = "1"
        self.shm = Path(shm)
        # processes below this one already (a watch made inside a test: the run's servers, say) are not its
        self._before = {(p, _start_time(p)) for p in descendants(os.getpid())}
        self.shm_before = set(os.listdir(self.shm)) if self.shm.is_dir() else set()
        fd, self.fork_log = tempfile.mkstemp(prefix="yolo_data_test_forks_")
        os.close(fd)
        self._log_fd = os.open(self.fork_log, os.O_WRONLY | os.O_APPEND)
        self._log_id = self._file_id(self._log_fd)
        os.register_at_fork(after_in_child=self._forked)

    @staticmethod
    def _file_id(fd: int) -> Tuple[int, int]:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    def _forked(self) -> None:
        # the hook outlives close(), and a child may close descriptors: a number can mean another file
        with contextlib.suppress(OSError):
            if self._log_fd is not None and self._file_id(self._log_fd) == self._log_id:
                os.write(self._log_fd, f"{os.getpid()} {_start_time('self')}\n".encode())

    def _forks(self) -> List[Tuple[int, str]]:
        with contextlib.suppress(OSError):
            return [(int(p), t) for p, t in (line.split() for line in Path(self.fork_log).read_text().splitlines())]
        return []

    def _running(self) -> List[int]:
        me = os.getpid()
        pids = set(descendants(me)) | set(proctree.marked_pids(self.mark))
        pids |= {p for p, t in self._forks() if _start_time(p) == t}
        return sorted(p for p in pids - {me} if alive(p) and (p, _start_time(p)) not in self._before)

    def processes(self) -> List[int]:
        """The run's processes that still run (the interpreter's and torch's services left out)."""
        return [p for p in self._running() if not any(s in proctree.cmdline(p) for s in SERVICES)]

    def leftovers(self, grace: float = 30.0) -> "Leftovers":
        """What the run leaves: its processes still running after ``grace`` seconds to end on their
        own (then killed), and the new entries of /dev/shm.  Returns at once when nothing is left."""
        deadline = time.monotonic() + grace
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.processes()
        named = [f"{p} (parent {proctree.stat_field(p, 1)}): {proctree.cmdline(p)[:200]}" for p in left]
        with contextlib.suppress(RuntimeError):
            proctree.kill_all(left)
        new = sorted(set(os.listdir(self.shm)) - self.shm_before) if self.shm.is_dir() else []
        ours = {os.getpid()} | {p for p, _ in self._forks()}
        made = [n for n in new if (m := TORCH_SHM_NAME.match(n)) and int(m.group(1)) in ours]
        # torch's 'file_system' buffers are registered with torch_shm_manager, which removes them once
        # its last client (this process) has ended: while the run's manager runs, they are not left
        managed = any("torch_shm_manager" in proctree.cmdline(p) for p in self._running())
        return Leftovers(named, [] if managed else made, made if managed else [],
                         [n for n in new if n not in made])

    def close(self) -> None:
        os.environ.pop(self.mark, None)
        fd, self._log_fd = self._log_fd, None
        if fd is not None:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.fork_log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(fn, world, *args, timeout=300):
    """world real processes (forked: fast, and nothing distributed exists in the parent yet).  A rank that
    raises or dies fails the test (start_processes then ends the others); ranks still running after
    ``timeout`` seconds fail it too, and are killed with their DataLoader workers either way."""
    import torch.multiprocessing as tmp

    ctx = tmp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=False, start_method="fork")
    deadline = time.monotonic() + timeout
    with ended(ctx.processes):
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"{world} ranks of {fn.__name__} still running after {timeout} s", pytrace=False)


def init(rank, world, port, timeout_s=60):
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
