"""run_all, popen_all and ended (procs.py): every process a test starts is gone when the test is, also
a grandchild in a session of its own (as torchrun starts its ranks) or one reparented to init."""
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from procs import (SessionWatch, alive, as_text, descendants, ended, hard_limit, holding, popen_all, received,
                   run_all, run_tree, tagged_env)

# The grandchild is started in a new session (start_new_session=True, like torchrun's ranks), with its
# output away from the captured pipes (or the pipes, not the timeout, would keep the command waiting).
# The command prints its pid, its session and the grandchild's, then waits as long as it is told to.
PYTHON_GRANDCHILD = ("import os, subprocess, sys, time\n"
                     "gc = subprocess.Popen(['sleep', '600'], start_new_session=True,\n"
                     "                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                     "print('grandchild', gc.pid, os.getsid(0), os.getsid(gc.pid), flush=True)\n"
                     "time.sleep(float(sys.argv[1]))\n")
# setsid(1) in a subshell that exits at once: the grandchild is reparented to init (or a subreaper),
# out of reach of a walk down from the command.
SHELL_GRANDCHILD = ("(setsid sh -c 'echo grandchild $$; exec sleep 600 >/dev/null 2>&1' </dev/null &); "
                    "sleep \"$0\"")


def grandchild_cmd(kind, wait):
    if kind == "python":
        return [sys.executable, "-c", PYTHON_GRANDCHILD, str(wait)]
    return ["sh", "-c", SHELL_GRANDCHILD, str(wait)]


def grandchild_pid(output: str) -> int:
    line = next(ln for ln in output.splitlines() if ln.startswith("grandchild "))
    return int(line.split()[1])


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="the sweep needs /proc (Linux)")


@pytest.mark.parametrize("kind", ["python", "setsid"])
def test_timeout_ends_a_grandchild_in_its_own_session_and_reports_the_output(kind):
    tag, env = tagged_env()
    with hard_limit(120), pytest.raises(pytest.fail.Exception) as e:  # the command alone would take 600 s
        run_all(grandchild_cmd(kind, 600), 5, capture_output=True, text=True, env=env)
    message = str(e.value)
    assert "still running after 5 s" in message and "grandchild " in message, message  # the output so far
    pid = grandchild_pid(message)
    if kind == "python":
        _, _, own_sid, gc_sid = next(ln for ln in message.splitlines() if ln.startswith("grandchild ")).split()
        assert own_sid != gc_sid  # the setup: a session a process-group kill would not reach
    assert not alive(pid)
    assert holding(tag) == []


def test_processes_left_behind_by_a_command_that_returned_are_ended():
    tag, env = tagged_env()
    r = run_all(grandchild_cmd("python", 0), 60, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert not alive(grandchild_pid(r.stdout)) and holding(tag) == []


def test_run_tree_raises_timeout_expired_with_the_output_after_ending_everything():
    """What a benchmark gets (no pytest there): TimeoutExpired, raised once every process has gone."""
    tag, env = tagged_env()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_tree(grandchild_cmd("python", 600), 5, capture_output=True, env=env)
    assert not alive(grandchild_pid(as_text(e.value.stdout))) and holding(tag) == []


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_popen_all_ends_the_tree_when_the_block_raises(error):
    tag, env = tagged_env()
    with hard_limit(120), pytest.raises(error):  # a broken sweep leaves Popen's exit waiting for the command
        with popen_all(grandchild_cmd("python", 600), stdout=subprocess.PIPE, text=True, env=env) as p:
            pid = grandchild_pid(p.stdout.readline())
            assert alive(pid)
            raise error("the test stops here")
    assert p.returncode is not None and not alive(pid) and holding(tag) == []


def test_popen_all_communicate_timeout_fails_with_the_output():
    tag, env = tagged_env()
    with hard_limit(120), pytest.raises(pytest.fail.Exception) as e:
        with popen_all(grandchild_cmd("python", 600), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=env) as p:
            p.communicate(timeout=5)
    assert "still running after 5 s" in str(e.value) and "grandchild " in str(e.value)
    assert not alive(grandchild_pid(str(e.value))) and holding(tag) == []


def _hang_with_a_child(q):
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
    child.start()
    q.put(child.pid)
    time.sleep(600)


def test_ended_kills_forked_processes_and_their_children():
    ctx = multiprocessing.get_context("fork")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_hang_with_a_child, args=(q,))]
    with ended(procs):
        procs[0].start()
        child = q.get()
        procs[0].join(0.5)
    assert procs[0].exitcode is not None and not alive(child)


# -- what a whole run leaves behind (conftest.py's check at the run's end) -----------------------------
def _leave_shared_memory_and_hang(shm, conn):
    name = f"torch_{os.getpid()}_1_0"  # as torch names a buffer: after the pid of its maker
    (Path(shm) / name).write_text("")
    conn.send(name)
    time.sleep(600)


def test_the_run_names_and_ends_the_processes_its_tests_left_and_names_their_shared_memory(tmp_path):
    """A forked process still running, and a command's child reparented to init (found by the run's mark
    in its environment), are named and killed; an entry of the shared-memory folder named after a process
    the run forked is the run's, one named after another process is only 'other', one there before is
    neither.  (A folder of the test's own stands in for /dev/shm.)"""
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "torch_1_0_0").write_text("")  # there before the run
    ctx = multiprocessing.get_context("fork")
    earlier = ctx.Process(target=time.sleep, args=(600,), daemon=True)  # a server the run started before
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_leave_shared_memory_and_hang, args=(str(shm), send), daemon=True)
    orphan = watch = None
    try:
        with ended([earlier, child]):
            earlier.start()
            watch = SessionWatch(shm)
            child.start()
            made = received(receive, 120, "name of the child's shared memory")
            # not run_all, whose sweep would end the orphan: the command itself ends at once
            orphan_cmd = ("import subprocess as s; print(s.Popen(['sleep', '600'], start_new_session=True, "
                          "stdout=s.DEVNULL, stderr=s.DEVNULL).pid)")
            r = subprocess.run([sys.executable, "-c", orphan_cmd], timeout=120, capture_output=True, text=True)
            orphan = int(r.stdout)
            (shm / "torch_999999999_0_0").write_text("")  # no process of the run has that pid
            assert alive(orphan) and orphan not in descendants(os.getpid())  # only the mark finds it
            left = watch.leftovers(grace=0)
            assert [int(line.split()[0]) for line in left.processes] == sorted([child.pid, orphan])
            assert not alive(child.pid) and not alive(orphan) and alive(earlier.pid)
            # pending instead, while an earlier test's torch_shm_manager runs (it removes them at the end)
            assert left.shm + left.pending == [made] and left.other == ["torch_999999999_0_0"]
    finally:
        if watch is not None:
            watch.close()
        if orphan is not None and alive(orphan):
            os.kill(orphan, 9)
    assert watch.mark not in os.environ
