"""tools/proctree.py: a command's processes are ended with it, also those whose environment no longer
shows the command's mark (Ray's agents and workers set their process title, which blanks it)."""
from __future__ import annotations

import subprocess
import time

from procs import alive, popen_all, proctree


def _unmarked_child(start_new_session: bool) -> int:
    """Leaves a command whose child runs with an empty environment (``env -i``: no mark) and returns that
    child's pid, read before leaving."""
    script = "env -i sleep 300 & echo $!; wait"
    with popen_all(["bash", "-c", script], stdout=subprocess.PIPE, text=True,
                   start_new_session=start_new_session) as proc:
        pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 30
        while not proctree.cmdline(pid).startswith("sleep"):  # until env has run sleep in its place
            assert time.monotonic() < deadline and alive(pid), proctree.cmdline(pid)
            time.sleep(0.01)
    return pid


def test_a_child_without_the_mark_is_ended_with_the_session_of_its_command():
    pid = _unmarked_child(start_new_session=True)
    assert not alive(pid)


def test_the_mark_alone_misses_a_child_that_blanked_its_environment():
    pid = _unmarked_child(start_new_session=False)
    try:
        assert alive(pid)  # why a command of Ray's is started in a session of its own
    finally:
        proctree.kill_all([pid])
