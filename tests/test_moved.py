"""The 0.3 flat import paths: each still imports, as the same module object as its new path, with a
DeprecationWarning that names the new path; the finder claims those names and nothing else."""
import importlib
import subprocess
import sys
import warnings

import pytest

import yolo_data
from yolo_data.moved import MOVED, MovedFinder


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_path_is_the_new_module_with_a_warning_naming_it(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is new
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"{old} moved to {MOVED[old]}; the old path goes away in yolo_data 0.5"]


def test_the_documented_forms_of_an_old_import_work_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import yolo_data\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            "from yolo_data.segment import create_dataloader\n"
            "from yolo_data import cache, remote\n"
            "import yolo_data.store as store\n"
            "from yolo_data.geometry import letterbox\n"
            "from yolo_data.sampling import YoloSampler\n"
            "import yolo_data.integrations.yolov5_segment as seg, yolo_data.labels.cache as c\n"
            "assert create_dataloader is seg.create_dataloader and cache is c\n"
            "assert store.LabelStore.__module__ == 'yolo_data.labels.store'\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr  # importing yolo_data itself warns of nothing


def test_the_finder_claims_only_its_names_and_is_installed_once():
    finder = MovedFinder()
    assert finder.find_spec("yolo_data.no_such_module") is None
    assert finder.find_spec("yolo_data.labels.cache") is None
    assert finder.find_spec("cache") is None
    yolo_data.moved.install()
    yolo_data.moved.install()
    assert sum(isinstance(f, MovedFinder) for f in sys.meta_path) == 1
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("yolo_data.no_such_module")
