"""The processes a command started, read from /proc (Linux), and a way to run a command that ends every
one of them however the run ends.  Standard library only, no side effect on import: the test suite
(tests/procs.py) and the benchmark scripts (benchmarks/common.py) both use it, and neither depends on
the other.

Why by a mark in the environment, not by parent or process group: torchrun starts each rank in a
session of its own (``start_new_session=True``), so killing the command's process group misses the
ranks; a rank's DataLoader workers are its children, and once the rank dies they are reparented to
init, out of reach of a walk down the tree from the command.  Every one of them inherited the
environment of the command (fork keeps it, exec passes it on), and any user may read
/proc/<pid>/environ of their own processes.  The variable's name is unique to the run (not only its
value), so a marked command that starts marked commands of its own (a test running a benchmark that
runs torchrun) leaves both marks on the inner processes, and either sweep finds them.

A process forked without an exec shows in /proc/<pid>/environ the environment its program was started
with, not a variable set later with ``os.environ``: processes forked from the calling process itself
(multiprocessing, DataLoader workers) are found as its ``descendants`` instead.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from typing import Dict, List, Optional, Tuple

RUN_MARK = "YOLO_DATA_RUN_"
SWEEP_S = 10.0  # how long the killed processes get to be gone before it is an error


def child_pids(pid: int) -> List[int]:
    """The direct children of ``pid`` (of any of its threads), e.g. a DataLoader's workers."""
    kids = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return kids


def descendants(pid: int) -> List[int]:
    """All processes below ``pid``, children of children included."""
    found, todo = [], [pid]
    while todo:
        kids = child_pids(todo.pop())
        found += kids
        todo += kids
    return found


def stat_field(pid, i: int) -> Optional[str]:
    """Field ``i`` of /proc/<pid>/stat counted after the command name (0: state, 1: parent pid,
    19: start time in clock ticks since boot), or None where the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[i]
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Does ``pid`` run?  A zombie has ended: only its exit status waits for its parent."""
    return stat_field(pid, 0) not in (None, "Z", "X")


def cmdline(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def marked_env(env: Optional[Dict[str, str]] = None) -> Tuple[str, Dict[str, str]]:
    """(mark, a copy of ``env`` (default os.environ) with the variable that marks the processes of one
    command, for ``marked_pids`` and ``end_marked``)."""
    mark = f"{RUN_MARK}{uuid.uuid4().hex}"
    return mark, dict(os.environ if env is None else env, **{mark: "1"})


def marked_pids(mark: str) -> List[int]:
    """The live processes other than this one whose environment holds ``mark`` (of this user: others'
    cannot be read; a zombie's environment reads as empty).  [] without /proc."""
    needle = mark.encode() + b"="
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone meanwhile, or not ours
            continue
        if any(var.startswith(needle) for var in env.split(b"\0")):
            found.append(int(name))
    return found


def kill_all(pids, within: float = SWEEP_S) -> None:
    """SIGKILL ``pids`` and wait until none of them runs; RuntimeError naming those still there after
    ``within`` seconds (SIGKILL takes effect when a process next runs)."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + within
    while [pid for pid in pids if alive(pid)]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {[p for p in pids if alive(p)]} still alive {within:.0f} s after SIGKILL")
        time.sleep(0.02)


def session_pids(sid: int) -> List[int]:
    """The live processes of session ``sid`` other than this one (field 3 of /proc/<pid>/stat)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()
            and stat_field(name, 3) == str(sid) and alive(int(name))]


def end_marked(mark: str, within: float = SWEEP_S, sessions=()) -> None:
    """SIGKILL every process marked with ``mark``, and every process of the sessions ``sessions``, until
    none is left (a parent killed a moment after it forked leaves a child the next look finds);
    RuntimeError naming those still there after ``within`` seconds.  Does nothing where there is no /proc.

    The mark misses a process that rewrote its environment's memory: one that sets its process title
    (Ray's workers and agents do) shows an empty /proc/<pid>/environ.  A command started in a session of
    its own (``start_new_session=True``) keeps such processes in that session, where ``sessions`` finds
    them."""
    deadline = time.monotonic() + within
    while True:
        pids = sorted(set(marked_pids(mark)).union(*(session_pids(sid) for sid in sessions)))
        if not pids:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} still alive {within:.0f} s after SIGKILL")
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def run_tree(cmd, timeout: Optional[float], **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, timeout=timeout, **kw)``, and then every process the command started is
    ended however the call ends (return, timeout, an exception, Ctrl-C): subprocess.run itself kills
    only the command.  On timeout, raises subprocess.TimeoutExpired (its ``stdout``/``stderr``: the
    output so far, bytes) after the sweep."""
    mark, kw["env"] = marked_env(kw.get("env"))
    try:
        return subprocess.run(cmd, timeout=timeout, **kw)
    finally:
        end_marked(mark)


@contextlib.contextmanager
def popen_tree(cmd, **kw):
    """``subprocess.Popen(cmd, **kw)`` as a context manager that, on leaving, ends the command and every
    process it started (see ``run_tree``; with ``start_new_session=True``, every process of its session
    too) and reaps the command."""
    mark, kw["env"] = marked_env(kw.get("env"))
    with subprocess.Popen(cmd, **kw) as proc:
        try:
            yield proc
        finally:
            end_marked(mark, sessions=(proc.pid,) if kw.get("start_new_session") else ())


def as_text(output) -> str:
    """TimeoutExpired's output (bytes even for text=True, or None) as text."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
