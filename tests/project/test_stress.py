"""The kill -9 stress script in its short mode (the long run is reported in the notes)."""
import sys
from pathlib import Path

from conftest import run_all

SCRIPT = Path(__file__).resolve().parents[1] / "stress" / "kill_writers.py"


def test_killed_writers_never_leave_a_torn_cache_or_wrong_labels():
    r = run_all([sys.executable, str(SCRIPT), "--rounds", "6", "--images", "200", "--quiet"],
                capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "labels always right" in r.stdout and "writers killed with SIGKILL" in r.stdout
