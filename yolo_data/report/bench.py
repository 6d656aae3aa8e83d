"""``yolo-data bench DATA``: where a training loader's time goes, and whether it keeps a model fed.

    stages   one thread of this process over the loader's own batches: read, decode, augment, collate,
             transfer, each in ms per training image and as a share of their sum
    loader   the real loader (build_loader, Settings.training, N workers) after warm-up: img/s, and CPU
             time per image of the whole process tree (this process and its workers)
    consumer a stand-in training step on the device (or the caller's own step time): img/s
    verdict  which of the two is slower, and the workers whose CPU time covers the consumer's rate

A stage measured by other means (a device stage, where batches are decoded and augmented on the GPU)
is one more StageTime in ``BenchResult.stages``: the table, its shares and its total follow from the list.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Dict, List, Optional

import torch
from torch import nn

from ..build import build_loader
from ..dataset import YoloDataset
from ..items.mapping import make_mapper
from ..items.parts import DatasetParts
from ..loading.tensors import Scratch
from ..settings import Settings
from .benchtimers import Progress, TimedImages, one_thread

DEFAULT_IMAGES = 256  # timed per phase, or the whole split when it is smaller
STAND_IN = "stand-in model of 12 convolutions, 4.2 GFLOPs per 640x640 image forward (YOLOv5n: 4.5)"
HOW = {
    "read": "the encoded bytes: the file read whole, or the batch's fetch from its bucket",
    "decode": "load_image of those bytes: decode (simplejpeg or OpenCV), resize to the long side",
    "augment": "the rest of the dataset's batch (mosaic, perspective, HSV, flips, writing the batch "
               "tensor): its time less its read and decode",
    "collate": "the loader's collate function on the batch's items",
    "transfer": "the batch's images and targets pinned and copied to the device, non_blocking, synchronised",
}
STAGES = tuple(HOW)  # the table's rows, in order; a stage measured elsewhere is appended to BenchResult.stages
# with the device stage (Settings(device=...)): what the rows time instead
HOW_STAGE = {
    "read": "the encoded bytes (ImageSource.encoded): a JPEG's file read whole, or the batch's fetch",
    "decode": "images a worker decodes itself (not JPEG): read, decode and resize",
    "augment": "the rest of the dataset's batch: labels through mosaic, perspective and flips, and each "
               "item's layout (its pixels are made by the device stage)",
    "collate": "the loader's collate function: the items' layouts and bytes joined into the batch's",
    "device stage": "decode on the device, resize, mosaic, warp, mixup, HSV and flips (DeviceStage), "
                    "targets moved, synchronised",
}
CPU_TRANSFER = "device cpu has no transfer: a copy of the batch's images and targets, the least a hand-over costs"


@dataclass(frozen=True)
class BenchOptions:
    """What ``yolo-data bench`` measures.  ``workers``: the loader's (None: min(8, CPUs)); ``images``:
    timed per phase (None: DEFAULT_IMAGES or the split, the smaller); ``hyp``: YOLOv5 hyp yaml (None:
    hyp.scratch-low's); ``device``: where batches go and the stand-in step runs (None: 'cuda' when
    available, else 'cpu'); ``step_ms``: the caller's own training step, in ms per batch, instead of
    the stand-in; ``cache_dir``: where label caches go (Settings.cache_dir); ``progress``: bars on stderr;
    ``device_stage``: the loader decodes and augments on ``device`` (Settings.loader.device, docs/device.md)."""
    img_size: int = 640
    batch: int = 16
    workers: Optional[int] = None
    images: Optional[int] = None
    hyp: Optional[str] = None
    device: Optional[str] = None
    step_ms: Optional[float] = None
    cache_dir: Optional[str] = None
    progress: bool = True
    device_stage: bool = False


@dataclass(frozen=True)
class StageTime:
    """``seconds`` spent in stage ``name`` while ``images`` training images were made; ``how``: what was timed."""
    name: str
    seconds: float
    images: int
    how: str

    @property
    def ms_per_image(self) -> float:
        return 1000 * self.seconds / max(self.images, 1)


@dataclass(frozen=True)
class LoaderRate:
    """``images`` batched by ``workers`` workers in ``seconds`` (wall) after the warm-up, using
    ``cpu_main`` and ``cpu_workers`` seconds of CPU; ``cpu_how``: how the workers' CPU was read."""
    workers: int
    images: int
    seconds: float
    cpu_main: float
    cpu_workers: float
    warmup_batches: int
    cpu_how: str

    @property
    def rate(self) -> float:
        return self.images / self.seconds

    @property
    def cpu_ms(self) -> float:
        """CPU ms per image of the whole process tree."""
        return 1000 * (self.cpu_main + self.cpu_workers) / self.images


@dataclass(frozen=True)
class ConsumerRate:
    """The training step's ``step_ms`` per batch of ``batch``; ``how``: the stand-in, or given."""
    step_ms: float
    batch: int
    how: str

    @property
    def rate(self) -> float:
        return 1000 * self.batch / self.step_ms


@dataclass
class BenchResult:
    """Everything ``format_bench`` prints."""
    title: str
    stages: List[StageTime]
    loader: LoaderRate
    consumer: ConsumerRate
    cpus: int
    device: str = "cpu"
    device_stage: bool = False  # the suggestion then counts the workers' CPU only (the stage runs in main)


def epochs(loader, keys: bool = False):
    """The loader's batches (``keys``: its batch sampler's lists of ItemKeys), epoch after epoch."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from (loader.batch_sampler if keys else loader)
        epoch += 1


def hand_over(batch, device: torch.device):
    """The batch's images and targets on ``device`` once the copy is done (see HOW['transfer'])."""
    imgs, targets = batch[0], batch[1]
    if device.type == "cpu":
        return imgs.to(device, copy=True), targets.to(device, copy=True)
    out = imgs.pin_memory().to(device, non_blocking=True), targets.pin_memory().to(device, non_blocking=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


def measure_stages(loader, images: int, device: torch.device, progress: bool = True):
    """(stages, (H, W) of the batches): the loader's batches made in this process on one thread by a
    copy of its dataset whose images are TimedImages, timed stage by stage over ``images`` items after
    one untimed batch (first calls: OpenCV's and the decoder's set-up, the reused arrays)."""
    base = loader.dataset
    timed, scratch = TimedImages(base.images), Scratch()
    mapper = make_mapper(base.index, timed, base.settings, base.task, base.control, scratch)
    dataset = YoloDataset(base.path, base.settings, run=base.run, parts=DatasetParts(
        base.split_labels, base.task, base.index, timed, base.control, scratch, mapper, base.storage))
    finish = hand_over if loader.device_stage is None else partial(through_stage, loader.device_stage)
    seconds, batches = dict.fromkeys(("made", "collate", "transfer"), 0.0), epochs(loader, keys=True)
    with one_thread(), Progress("timing stages on one thread", images, enabled=progress) as bar:
        finish(loader.collate_fn(dataset.__getitems__(next(batches))), device)
        n, hw = 0, None
        timed.read, timed.decode, timed.decodes = 0.0, 0.0, 0
        while n < images:
            keys = next(batches)
            t0 = time.perf_counter()
            items = dataset.__getitems__(keys)  # torch's batch fetch, as a worker makes it: partners, batch tensor
            t1 = time.perf_counter()
            batch = loader.collate_fn(items)
            t2 = time.perf_counter()
            moved = finish(batch, device)
            for name, t in zip(seconds, (t1 - t0, t2 - t1, time.perf_counter() - t2)):
                seconds[name] += t
            # freed outside the timings, as a training loop frees them (a 640 batch: 20 MB given back)
            n, hw = n + len(keys), tuple(batch[0].shape[2:])
            del items, batch, moved
            bar.update(len(keys))
    last = "transfer" if loader.device_stage is None else "device stage"
    stages = {"read": timed.read, "decode": timed.decode, "augment": seconds["made"] - timed.read - timed.decode,
              "collate": seconds["collate"], last: seconds["transfer"]}
    how = dict(HOW if loader.device_stage is None else HOW_STAGE)
    how["decode"] = f"{how['decode']} ({timed.decodes / n:.2f} per training image)"
    how["transfer"] = CPU_TRANSFER if device.type == "cpu" else how.get("transfer")
    return [StageTime(name, s, n, how[name]) for name, s in stages.items()], hw


def through_stage(stage, batch, device: torch.device):
    """The batch made by the device ``stage`` (images and targets on the device), synchronised."""
    out = stage(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


def tree_cpu(pid: int) -> Optional[Dict[int, float]]:
    """{pid: CPU seconds (user + system)} of each process below ``pid`` (its children, theirs, ...),
    read from /proc; None where there is no /proc."""
    if not os.path.isdir(f"/proc/{pid}"):
        return None
    ticks, parents, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:  # ended while listed
            continue
        fields = text[text.rindex(")") + 2:].split()  # after the command, which may hold spaces
        parents[int(name)], cpu[int(name)] = int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks
    below, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child, parent in parents.items():
            if parent == p and child not in below:
                below[child] = cpu[child]
                todo.append(child)
    return below


def children_cpu() -> float:
    """CPU seconds of this process's ended and reaped children (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def loader_rate(data, settings: Settings, images: int, progress: bool = True) -> LoaderRate:
    """The real loader of ``data`` under ``settings``: after one warm-up batch per worker (their start
    included), the wall time and the process tree's CPU time of the next batches of ``images`` items.
    The workers' CPU is read from /proc while they run; without /proc, from their rusage once reaped
    (their whole life, start included)."""
    reaped0 = children_cpu()
    loader = build_loader(data, settings)
    workers, warm = loader.num_workers, max(loader.num_workers, 1)
    batches = epochs(loader)
    with Progress(f"timing the loader, {workers} worker{'s' * (workers != 1)}", images, enabled=progress) as bar:
        for _ in range(warm):
            next(batches)
        t0, main0, tree0, n = time.perf_counter(), time.process_time(), tree_cpu(os.getpid()), 0
        while n < images:
            k = len(next(batches)[0])  # no reference kept: the workers reuse a batch's memory once dropped
            n += k
            bar.update(k)
        t1, main1, tree1 = time.perf_counter(), time.process_time(), tree_cpu(os.getpid())
    batches.close()
    del loader, batches  # the workers end and are reaped here
    if tree0 is None or tree1 is None:
        how, cpu_workers = "rusage of the reaped workers, start included", children_cpu() - reaped0
    else:
        how, cpu_workers = "/proc while they ran", sum(c - tree0.get(p, 0.0) for p, c in tree1.items())
    return LoaderRate(workers, n, t1 - t0, main1 - main0, cpu_workers, warm, how)


def stand_in_model() -> nn.Sequential:
    """A stand-in for a small detector (STAND_IN): conv-BN-SiLU layers down to stride 32, YOLOv5's 6x6
    stem, and a 1x1 head of 255 channels."""
    def conv(c1: int, c2: int, k: int = 3, s: int = 1, p: int = 1) -> List[nn.Module]:
        return [nn.Conv2d(c1, c2, k, s, p, bias=False), nn.BatchNorm2d(c2), nn.SiLU()]
    layers = conv(3, 16, 6, 2, 2) + conv(16, 32, 3, 2) + conv(32, 32) + conv(32, 32) + conv(32, 64, 3, 2)
    layers += conv(64, 64) + conv(64, 64) + conv(64, 128, 3, 2) + conv(128, 128) + conv(128, 256, 3, 2)
    return nn.Sequential(*layers, *conv(256, 256), nn.Conv2d(256, 255, 1))


def stand_in_step_ms(batch: int, hw, device: torch.device, progress: bool = True) -> float:
    """ms per training step of the stand-in model (forward, backward, SGD step) on a (batch, 3, H, W)
    uint8 batch on ``device``, scaled to [0, 1] as a trainer does; autocast float16 on CUDA.  Timed
    after warm-up steps (CUDA's context and kernels are made by the first ones)."""
    warm, steps = (1, 3) if device.type == "cpu" else (3, 10)
    model = stand_in_model().to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.zeros((batch, 3, *hw), dtype=torch.uint8, device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.float16, enabled=device.type == "cuda"):
            loss = model(x.float() / 255).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with Progress("timing the stand-in step", warm + steps, unit="steps", enabled=progress) as bar:
        for _ in range(warm):
            step()
            bar.update(1)
        t = time.perf_counter()
        for _ in range(steps):
            step()
            bar.update(1)
    return 1000 * (time.perf_counter() - t) / steps


def cpu_count() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_bench(data, options: BenchOptions = BenchOptions()) -> BenchResult:
    """Measure ``data``'s training loader (see the module docstring).

    Args:
        data: dataset yaml (its train split), image folder or list, as build_loader takes it.
        options: what to measure (BenchOptions).

    Returns:
        The BenchResult, for format_bench.  OSError or ValueError for data that cannot be read or a
        CUDA device that is not there.
    """
    device = torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device}: torch finds no CUDA device here (torch.cuda.is_available() is False)")
    cpus = cpu_count()
    workers = min(8, cpus) if options.workers is None else options.workers
    settings = Settings.training(img_size=options.img_size, batch_size=options.batch, hyp=options.hyp,
                                 workers=workers, cache_dir=options.cache_dir,
                                 device=str(device) if options.device_stage else None)
    probe = build_loader(data, settings.replace(workers=0))
    images = min(DEFAULT_IMAGES, len(probe.dataset)) if options.images is None else options.images
    stages, hw = measure_stages(probe, images, device, options.progress)
    del probe
    loader = loader_rate(data, settings, images, options.progress)
    if options.step_ms is None:
        consumer = ConsumerRate(stand_in_step_ms(options.batch, hw, device, options.progress), options.batch,
                                f"{STAND_IN}, forward, backward and SGD step on {hw[0]}x{hw[1]}")
    else:
        consumer = ConsumerRate(options.step_ms, options.batch, "--step-ms")
    hyp = os.path.basename(options.hyp) if options.hyp else "hyp.scratch-low"
    title = (f"{data}: training loader at img size {options.img_size}, batch {options.batch}, {hyp}, "
             f"device {device}{' with the device stage' * options.device_stage}; {images} images timed")
    return BenchResult(title, stages, loader, consumer, cpus, str(device), options.device_stage)


def stage_table(stages: List[StageTime]) -> List[str]:
    """The per-stage table: ms per image and share of the total, a total row, then how each was timed."""
    total = sum(s.seconds for s in stages)
    width = max(len("total"), *(len(s.name) for s in stages))
    lines = [f"{'stage':<{width}}  {'ms/img':>9}  {'share':>6}"]
    for s in stages:
        lines.append(f"{s.name:<{width}}  {s.ms_per_image:9.3f}  {100 * s.seconds / total:5.1f}%")
    lines.append(f"{'total':<{width}}  {sum(s.ms_per_image for s in stages):9.3f}  {100.0:5.1f}%")
    lines.append(f"(one thread of this process, {stages[0].images} training images)")
    lines += [f"  {s.name}: {s.how}" for s in stages]
    return lines


def figure(rate: float) -> str:
    """A rate as printed: one decimal, or three significant digits below 1 (never a 0 to divide by)."""
    return f"{rate:.1f}" if rate >= 1 else f"{rate:.3g}"


def verdict(loader_rate: float, consumer_rate: float) -> str:
    """Which side is slower, from the two rates as printed."""
    if loader_rate < consumer_rate:
        return f"verdict: the loader is the bottleneck ({figure(loader_rate)} img/s < {figure(consumer_rate)} img/s)"
    spare = 100 * (loader_rate / consumer_rate - 1)
    return f"verdict: the model is the bottleneck: the loader keeps up with {spare:.0f}% to spare"


def suggestion(cpu_ms: float, consumer_rate: float, cpus: int) -> str:
    """The workers whose CPU time per image (``cpu_ms``, the whole tree's) covers ``consumer_rate``, at
    least 1 and at most ``cpus``, with the arithmetic (on the values as printed)."""
    need = consumer_rate * cpu_ms / 1000
    n = min(max(math.ceil(need), 1), cpus)
    line = (f"suggested workers: {n} = ceil({figure(consumer_rate)} img/s x {cpu_ms:.2f} ms CPU/img / 1000) = "
            f"ceil({need:.2f})")
    if math.ceil(need) > cpus:
        return line + (f", capped at {cpus} CPUs: about {cpus * 1000 / cpu_ms:.1f} img/s at most on this "
                       "machine")
    return line + f" (of {cpus} CPUs)"


def format_bench(result: BenchResult) -> str:
    """The report ``yolo-data bench`` prints (see the module docstring)."""
    ld, co = result.loader, result.consumer
    # the verdict and the suggestion use the numbers as printed, so a reader can redo them
    rate, cpu_ms, consumer = float(figure(ld.rate)), float(f"{ld.cpu_ms:.2f}"), float(figure(co.rate))
    lines = [result.title, ""] + stage_table(result.stages) + [""]
    lines.append(f"loader: {figure(rate)} img/s with {ld.workers} worker{'s' * (ld.workers != 1)} ({ld.images} images "
                 f"after {ld.warmup_batches} warm-up batch{'es' * (ld.warmup_batches != 1)})")
    lines.append(f"        CPU {cpu_ms:.2f} ms/img: main {1000 * ld.cpu_main / ld.images:.2f} + workers "
                 f"{1000 * ld.cpu_workers / ld.images:.2f} (the workers' read from {ld.cpu_how})")
    lines.append(f"consumer: {figure(consumer)} img/s: {figure(co.step_ms)} ms per batch of {co.batch} ({co.how}, "
                 f"on {result.device})")
    if result.device_stage:  # the main process's share is the stage's: more workers do not spread it
        cpu_ms = float(f"{1000 * ld.cpu_workers / ld.images:.2f}")
    lines += [verdict(rate, consumer), suggestion(cpu_ms, consumer, result.cpus)]
    return "\n".join(lines)
