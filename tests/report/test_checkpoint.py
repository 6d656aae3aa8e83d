"""Which data a checkpoint's model was trained on (report/checkpoint.py): the record read back without
running any code the file holds (a hostile file's code does run under plain torch.load), a checkpoint
without one, files that are no checkpoint, the record written into a file and its copies, and
``yolo-data report DATA --checkpoint`` saying "same data", then "changed" after a label edit (exit 1
with ``--fail-on data-changed``).  The record made by a real Ultralytics training through the plug-in:
tests/integrations/test_ultralytics_integration.py."""
import collections
import json
import zipfile
from pathlib import Path

import pytest
import torch

from yolo_data.build import build_loader
from yolo_data.cli import main as cli_main
from yolo_data.report.checkpoint import (add_record, checkpoint_lines, compare_record, make_record, read_record,
                                         split_record)
from yolo_data.report.compose import FINDINGS, ReportOptions, make_report
from yolo_data.settings import Settings

from test_report import sample_copy

QUICK = ["--no-pictures", "--no-duplicates"]
RECORD = {"version": 1, "yolo_data": "0.3.0", "data": "data.yaml",
          "splits": {"train": {"digest": "0123456789abcdef0123456789abcdef", "images": 16}}}


class Reduces:
    """Unpickled, it runs a callable the pickle names (REDUCE): ``exec``, writing ``marker``.reduce."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker + '.reduce'!r}, 'w').write('ran')",)


class News:
    """Unpickled, its own ``__new__`` runs (NEWOBJ) and writes ``marker``.newobj."""

    def __new__(cls, marker=None):
        if marker is not None:
            Path(marker + ".newobj").write_text("ran")
        return super().__new__(cls)

    @classmethod
    def made(cls, marker: Path) -> "News":
        obj = super().__new__(cls)
        obj.marker = str(marker)
        return obj

    def __getnewargs__(self):
        return (self.marker,)


class Stateful:
    """Unpickled, its ``__setstate__`` runs (BUILD) and writes ``marker``.build."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __setstate__(self, state):
        Path(state["marker"] + ".build").write_text("ran")


def hostile_checkpoint(path: Path, marker: Path, record=RECORD) -> Path:
    """A checkpoint dict as Ultralytics saves one (a model object, tensors in an OrderedDict, a set), whose
    unpickling runs code (Reduces, News, Stateful), with ``record`` under ``yolo_data`` (left out when None)."""
    ckpt = {"epoch": 3, "model": Reduces(marker), "ema": Stateful(marker), "news": News.made(marker),
            "layer": torch.nn.Linear(2, 3),
            "optimizer": collections.OrderedDict(w=torch.ones(4), step=torch.tensor(7)), "tags": {1, 2},
            "train_args": {"imgsz": 64, "data": "data.yaml"}}
    if record is not None:
        ckpt["yolo_data"] = record
    torch.save(ckpt, path)
    return path


def ran(marker: Path):
    return sorted(p.suffix for p in marker.parent.glob(marker.name + ".*"))


def test_the_record_is_read_without_running_any_code_of_the_file(tmp_path):
    marker = tmp_path / "marker"
    f = hostile_checkpoint(tmp_path / "best.pt", marker)
    assert read_record(f) == RECORD
    assert ran(marker) == []  # nothing of the file ran
    torch.load(f, weights_only=False)  # what a plain load of the same file does
    assert ran(marker) == [".build", ".newobj", ".reduce"]


def test_a_checkpoint_without_a_record_has_none(tmp_path):
    marker = tmp_path / "marker"
    assert read_record(hostile_checkpoint(tmp_path / "plain.pt", marker, record=None)) is None
    torch.save([1, 2, 3], tmp_path / "list.pt")  # not a dict: no record either
    assert read_record(tmp_path / "list.pt") is None
    assert ran(marker) == []


def test_a_file_that_is_no_torch_checkpoint_is_a_value_error_naming_it(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    other_zip = tmp_path / "other.pt"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("a/readme.txt", "hello")
    legacy = tmp_path / "legacy.pt"
    torch.save({"yolo_data": RECORD}, legacy, _use_new_zipfile_serialization=False)
    good = hostile_checkpoint(tmp_path / "good.pt", tmp_path / "marker")
    broken = tmp_path / "broken.pt"  # the pickle cut short
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, data[: len(data) // 2] if info.filename.endswith("data.pkl") else data)
    for f in (text, other_zip, legacy, broken):
        with pytest.raises(ValueError, match=f.name):
            read_record(f)
    with pytest.raises(OSError):
        read_record(tmp_path / "missing.pt")


@pytest.mark.parametrize("entry, why", [
    ({"version": 1, "splits": {"train": {"digest": "ab", "images": 3}}, "extra": (1, 2)}, "not plain data"),
    ({"version": 1, "splits": {"train": {"digest": "ab", "images": 3}}, "extra": Stateful}, "not plain data"),
    ({"version": 2, "splits": {}}, "newer"),
    ({"version": 1, "splits": {"train": {"images": 3}}}, "no splits"),
    ({"version": 1, "splits": {"train": {"digest": "ab", "images": 3, "fraction": "half"}}}, "no splits"),
    ("a string", "not plain data"),
])
def test_an_entry_that_is_no_record_of_this_version_is_refused(tmp_path, entry, why):
    f = tmp_path / "odd.pt"
    if isinstance(entry, dict) and entry.get("extra") is Stateful:  # an object in the record: inert too
        entry = dict(entry, extra=Stateful(tmp_path / "marker"))
    torch.save({"yolo_data": entry}, f)
    with pytest.raises(ValueError, match=why):
        read_record(f)
    assert ran(tmp_path / "marker") == []


def test_add_record_gives_the_file_and_its_same_copies_the_key(tmp_path):
    last, best, older = tmp_path / "last.pt", tmp_path / "best.pt", tmp_path / "epoch0.pt"
    torch.save({"epoch": 1, "ema": torch.nn.Linear(2, 3)}, last)
    best.write_bytes(last.read_bytes())
    torch.save({"epoch": 0}, older)
    before = older.read_bytes()
    add_record(last, RECORD, copies=(best, older, tmp_path / "epoch1.pt"))
    for f in (last, best):
        ckpt = torch.load(f, weights_only=False)
        assert ckpt["yolo_data"] == RECORD and ckpt["epoch"] == 1 and ckpt["ema"].weight.shape == (3, 2)
        assert read_record(f) == RECORD
    assert older.read_bytes() == before and not (tmp_path / "epoch1.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch0.pt", "last.pt"]  # no temporary left


def test_adding_a_record_runs_nothing_and_keeps_every_tensor_where_torch_put_it(tmp_path):
    """The record is added without unpickling the file (its hostile objects run nothing), the tensors load equal,
    plainly and memory-mapped, every record of the archive stays 64-byte aligned, and a second record replaces
    the first."""
    import struct
    import zipfile
    marker = tmp_path / "marker"
    f = hostile_checkpoint(tmp_path / "last.pt", marker, record=None)
    add_record(f, RECORD)
    assert ran(marker) == [] and read_record(f) == RECORD
    newer = dict(RECORD, data="other.yaml")
    add_record(f, newer)
    assert ran(marker) == [] and read_record(f) == newer
    blob = f.read_bytes()
    for info in zipfile.ZipFile(f).infolist():  # where each record's bytes begin: after its local header
        n, m = struct.unpack("<HH", blob[info.header_offset + 26:info.header_offset + 30])
        assert (info.header_offset + 30 + n + m) % 64 == 0, info.filename
    for mmap in (False, True):
        ckpt = torch.load(f, weights_only=False, mmap=mmap)
        assert ckpt["yolo_data"] == newer and ckpt["epoch"] == 3
        assert torch.equal(ckpt["optimizer"]["w"], torch.ones(4)) and int(ckpt["optimizer"]["step"]) == 7
        assert ckpt["layer"].weight.shape == (3, 2)
    with pytest.raises(ValueError, match="not a checkpoint dict"):
        torch.save([1, 2], tmp_path / "list.pt")
        add_record(tmp_path / "list.pt", RECORD)


def loaders_record(yaml: Path) -> dict:
    """The record the plug-in makes, from the train loader and a rect val loader of ``yaml``."""
    train = build_loader(yaml, Settings.training(img_size=64, batch_size=4, workers=0, early_start=False,
                                                 split="train"))
    val = build_loader(yaml, Settings.evaluation(img_size=64, batch_size=4, workers=0, rect=True, split="val"))
    # the train loader's own digest is the split's; the rect val loader's items are in another order
    assert train.state_dict()["dataset"] == train.dataset.split_labels.store.names_digest()
    assert val.state_dict()["dataset"] != val.dataset.split_labels.store.names_digest()
    return make_record(yaml, {name: split_record(loader.dataset.split_labels.store)
                              for name, loader in (("train", train), ("val", val))})


def test_the_report_says_same_data_then_changed_after_a_label_edit(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    record = loaders_record(yaml)
    assert set(record) == {"version", "yolo_data", "data", "splits"} and record["data"] == str(yaml)
    assert [s["images"] for s in record["splits"].values()] == [16, 8]
    ckpt = hostile_checkpoint(tmp_path / "best.pt", tmp_path / "marker", record)
    out = tmp_path / "r"
    args = ["report", str(yaml), "--out", str(out), *QUICK, "--checkpoint", str(ckpt), "--fail-on", "data-changed"]
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert f"checkpoint {ckpt}: trained on {yaml} with yolo_data" in text
    assert "  train: same data (16 images)\n  val: same data (8 images)\n" in text and "data-changed 0" in text
    f = json.loads(out.with_suffix(".json").read_text())
    assert {k: s["digest"] for k, s in f["splits"].items()} == {k: s["digest"] for k, s in record["splits"].items()}
    assert [r["status"] for r in f["checkpoint"]["splits"].values()] == ["same", "same"]
    assert "Checkpoint</h2>" in out.with_suffix(".html").read_text()

    label = tmp_path / "ds" / "labels" / "train" / "train_002.txt"
    label.write_text(label.read_text() + "1 0.5 0.5 0.1 0.1\n")  # one more object
    assert cli_main(args) == 1
    text = capsys.readouterr()
    assert "  train: changed since that training (16 images then and now, other names or labels)" in text.out
    assert "  val: same data (8 images)" in text.out and "failed on: data-changed" in text.err
    f = json.loads(out.with_suffix(".json").read_text())
    assert f["findings"]["data-changed"] == 1 and f["checkpoint"]["splits"]["train"]["status"] == "changed"
    assert "changed since that training" in out.with_suffix(".html").read_text()
    assert ran(tmp_path / "marker") == []


def test_a_plain_checkpoint_is_no_record_and_not_a_failure(tmp_path, capsys):
    yaml = sample_copy(tmp_path)
    plain = hostile_checkpoint(tmp_path / "plain.pt", tmp_path / "marker", record=None)
    out = tmp_path / "r"
    assert cli_main(["report", str(yaml), "--out", str(out), *QUICK, "--checkpoint", str(plain),
                     "--fail-on", "data-changed"]) == 0
    assert f"checkpoint {plain}: no record of its data" in capsys.readouterr().out
    f = json.loads(out.with_suffix(".json").read_text())
    assert f["checkpoint"] == {"file": str(plain), "recorded": False, "splits": {}, "changed": 0}
    assert "no record of its data" in out.with_suffix(".html").read_text()
    notes = tmp_path / "notes.pt"
    notes.write_text("hello\n")
    assert cli_main(["report", str(yaml), "--out", str(out), *QUICK, "--checkpoint", str(notes)]) == 2
    assert f"{notes}: not a torch checkpoint" in capsys.readouterr().err
    plain_report = make_report(yaml, ReportOptions(pictures=False, duplicates=False, progress=False))
    assert "checkpoint" not in plain_report.figures and plain_report.findings["data-changed"] == 0
    assert FINDINGS[-1] == "data-changed"


def test_a_split_gone_or_trained_on_a_fraction():
    record = make_record("d.yaml", {"train": {"digest": "a" * 32, "images": 10, "fraction": 0.5},
                                    "val": {"digest": "b" * 32, "images": 4},
                                    "test": {"digest": "c" * 32, "images": 2}})
    now = {"train": {"digest": "d" * 32, "images": 20}, "test": {"digest": "e" * 32, "images": 3},
           "extra": {"digest": "f" * 32, "images": 1}}
    c = compare_record(record, now, "best.pt")
    assert {k: r["status"] for k, r in c["splits"].items()} == {"train": "not-compared", "val": "absent",
                                                                 "test": "changed"}
    assert c["changed"] == 2
    lines = checkpoint_lines(c)
    assert lines[1] == "  train: trained on its first 10 images (fraction 0.5): not compared"
    assert lines[3] == "  test: changed since that training (2 images then, 3 now)"
