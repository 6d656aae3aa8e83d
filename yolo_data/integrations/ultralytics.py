"""Ultralytics' trainers and validators on yolo_data's datasets and loaders, for every task Ultralytics
trains from boxes and points: detect, segment, pose, obb.

    from ultralytics import YOLO
    from yolo_data.integrations.ultralytics import YoloDataTrainer
    YOLO("yolo11n.yaml").train(data="coco128.yaml", trainer=YoloDataTrainer, epochs=1, imgsz=320)
    YOLO("yolo11n-pose.yaml").train(data="tiger-pose.yaml", trainer=YoloDataTrainer)  # pose: the same class
    YOLO("yolo11n.yaml").train(data=memory_data(train_source, val_source), trainer=YoloDataTrainer)  # in memory

``YoloDataTrainer`` and ``YoloDataValidator`` become the task's class (``YoloDataSegmentationTrainer``, ...)
from the ``task`` Ultralytics gives them, so one name serves every model.

Ultralytics (AGPL-3.0) is imported here, when this module is imported, and nowhere else in yolo_data;
it is never a dependency.  No Ultralytics code is copied: the classes below override its documented
extension points (``build_dataset``, ``get_dataloader``, ``get_validator``; ``save_model``, which then
adds the record of the data to the files it wrote: report.checkpoint), and its DDP steps
(``_setup_ddp``, ``_setup_train``, ``_build_train_pipeline``, ``final_eval``) only where the trainer is
made in a process group set up before it, and call its own code for everything else (oriented boxes are
converted by its own ``xyxyxyxy2xywhr``).  What does not need Ultralytics lives in ``ultralytics_args``
(arguments -> settings), ``ultralytics_batch`` (batch dicts, labels as dicts), ``ultralytics_loader``
(dataset and loader) and ``ultralytics_group`` (a process group set up before the trainer: Ray Train).
"""
from __future__ import annotations

from contextlib import contextmanager
from copy import copy

import torch
import torch.distributed as dist
from ultralytics.cfg import get_cfg
from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator
from ultralytics.models.yolo.obb import OBBTrainer, OBBValidator
from ultralytics.models.yolo.pose import PoseTrainer, PoseValidator
from ultralytics.models.yolo.segment import SegmentationTrainer, SegmentationValidator
from ultralytics.utils import DEFAULT_CFG, LOCAL_RANK, LOGGER, RANK
from ultralytics.utils.ops import xyxyxyxy2xywhr
from ultralytics.utils.torch_utils import strip_optimizer, unwrap_model

from ..formats.ndjson import is_ndjson
from ..report.checkpoint import add_record, make_record, split_record
from ..storage import is_url
from .ultralytics_args import (check_arguments, class_subset, loader_settings, memory_data, names_differ, ndjson_data,
                               remote_dataset, split_fraction, take_own_args, validation_classes, warn_ignored)
from .ultralytics_group import group_size, wrap_cpu_model
from .ultralytics_loader import UltralyticsDataset, create_loader

__all__ = ["YoloDataTrainer", "YoloDataValidator", "YoloDataSegmentationTrainer", "YoloDataSegmentationValidator",
           "YoloDataPoseTrainer", "YoloDataPoseValidator", "YoloDataOBBTrainer", "YoloDataOBBValidator", "memory_data"]


def _grid(stride) -> int:
    """The model's largest stride as an int (a tensor, a list or an int), at least 32 as Ultralytics'
    trainer takes it."""
    return max(int(torch.as_tensor(stride).max()), 32)


def _set_loader_epoch(trainer) -> None:
    """Every epoch's batches come from (seed, epoch): tell the sampler which epoch this is, also
    without DDP (Ultralytics calls set_epoch only under DDP) and after a resume."""
    sampler = getattr(getattr(trainer, "train_loader", None), "sampler", None)
    if sampler is not None and hasattr(sampler, "set_epoch"):
        sampler.set_epoch(trainer.epoch)


def _to_xywhr(task: str):
    """The corner conversion an oriented-box batch needs: Ultralytics' own (its angle convention)."""
    return xyxyxyxy2xywhr if task == "obb" else None


def _task_of(args) -> str:
    if isinstance(args, dict):
        return args.get("task") or "detect"
    return getattr(args, "task", None) or "detect"


@contextmanager
def _reading_own_data(single_cls: bool, endpoint_url=None):
    """While a validator runs on its own (a trainer's final evaluation, ``model.val()``), its dataset
    check reads a yaml in a bucket (at ``endpoint_url``) and an NDJSON export as the trainer's
    ``get_dataset`` does (Ultralytics' own check cannot read s3:// paths, and converts an export by
    downloading every image); every other yaml still goes to Ultralytics' check.  Its extension points
    for this are the names its validator module calls."""
    import ultralytics.engine.validator as validator_module
    real = validator_module.check_det_dataset
    convert = getattr(validator_module, "convert_ndjson_to_yolo_if_needed", None)

    def check(dataset, *args, **kwargs):
        if is_ndjson(str(dataset)):
            return ndjson_data(str(dataset), single_cls, endpoint_url)
        if is_url(str(dataset)):
            return remote_dataset(str(dataset), single_cls, endpoint_url)
        return real(dataset, *args, **kwargs)

    def keep_export(data, *args, **kwargs):
        return data if is_ndjson(str(data)) else convert(data, *args, **kwargs)

    validator_module.check_det_dataset = check
    if convert is not None:
        validator_module.convert_ndjson_to_yolo_if_needed = keep_export
    try:
        yield
    finally:
        validator_module.check_det_dataset = real
        if convert is not None:
            validator_module.convert_ndjson_to_yolo_if_needed = convert


class OwnArgs:
    """yolo_data's own training arguments (ultralytics_args.OWN_ARGS), carried as a callback that does
    nothing: Ultralytics' DDP launch rebuilds the trainer in each rank's process from its args (which
    must hold Ultralytics' keys only), its model and its callbacks, so the callbacks are what brings
    them to the ranks."""
    event = "on_pretrain_routine_start"

    def __init__(self, values: dict):
        self.values = dict(values)

    def __call__(self, trainer) -> None:
        pass

    @classmethod
    def found_in(cls, callbacks) -> dict:
        """The values of the last OwnArgs in a callbacks dict ({} when it holds none)."""
        found = [c for c in (callbacks or {}).get(cls.event, []) if isinstance(c, cls)]
        return dict(found[-1].values) if found else {}


class YoloDataTrainer(DetectionTrainer):
    """Ultralytics' DetectionTrainer whose train and val loaders are yolo_data's; made for a pose or
    obb model (``task``), it is the task's trainer (YoloDataPoseTrainer, YoloDataOBBTrainer).

    ``workers`` is kept as asked also on CPU (Ultralytics' trainer sets it to 0 there; yolo_data's
    workers overlap decoding with the model's step and give the same batches for any count).  The val
    loader uses the same number of workers (Ultralytics doubles it).

    ``class_balance`` (``train(..., trainer=YoloDataTrainer, class_balance=0.1)``): the train loader
    repeats images of rare classes (Settings class_balance).  Ultralytics refuses keys it does not know,
    so the trainer takes it out of the overrides first; it reaches DDP ranks through the callbacks
    (OwnArgs).  A resumed run (``resume=True``) needs it given again.

    ``classes=[...]`` (Ultralytics' key) keeps those classes' label rows in both loaders;
    ``remap_classes=True`` (ours, carried as class_balance is) makes their ids 0..k-1 and the dataset
    dict the model is made from names the kept classes only (``get_dataset``), so the model has k
    classes.  Ultralytics' keys yolo_data cannot honour are refused here, before any training, and
    those it ignores are named in one warning each (ultralytics_args).

    Made in a process group of several ranks that was set up before it (a Ray Train worker, a torchrun
    process that called ``init_process_group``), the trainer is one DDP rank of that group: the
    global ``batch`` is split among its ranks and the model's gradients are averaged over them, on the
    device it was given (one GPU or the CPU; ultralytics_group says what Ultralytics alone would do).
    On the CPU the final validation of best.pt is skipped (Ultralytics' validator asks CUDA for a DDP
    rank's device): the last epoch's metrics stand.

    Args:
        cfg: Ultralytics' default configuration (its ``DEFAULT_CFG``, a yaml path or a dict), as for
            DetectionTrainer.
        overrides: Ultralytics' training arguments (``model.train(...)``'s keywords), plus yolo_data's
            own keys, which Ultralytics does not know (ultralytics_args.OWN_ARGS): ``class_balance``
            (a repeat-factor threshold in (0, 1], True for 0.1), ``remap_classes`` (bool, with
            ``classes``), ``endpoint_url`` (the S3-compatible server of an ``s3://`` dataset).
        _callbacks: Ultralytics' callbacks dict; a DDP rank's trainer gets yolo_data's own keys from it.

    Raises:
        ValueError: an argument yolo_data cannot honour (ultralytics_args.REFUSED, a bad
            ``class_balance`` or ``remap_classes``, ``classes`` that are not class ids, a ``scale`` pair
            that is not 1 -/+ a gain); several devices in a process group (one device a rank).
        RuntimeError: in a process group whose ranks are not those Ultralytics read at import.
    """

    def __new__(cls, cfg=DEFAULT_CFG, overrides=None, _callbacks=None):
        if cls is YoloDataTrainer:
            cls = _TRAINERS.get(get_cfg(cfg, take_own_args(overrides)[0]).task, cls)
        return super().__new__(cls)

    def __init__(self, cfg=DEFAULT_CFG, overrides=None, _callbacks=None):
        overrides, own = take_own_args(overrides)
        # given: this process's request; else a DDP rank's trainer, rebuilt with the launcher's callbacks
        own = own or OwnArgs.found_in(_callbacks)
        self.class_balance = own.get("class_balance", False)
        self.remap_classes = own.get("remap_classes", False)
        check_arguments(get_cfg(cfg, overrides))  # before BaseTrainer reads the dataset or builds the model
        # before BaseTrainer reads the dataset yaml, which may be in the bucket; the loaders' settings too
        self.endpoint_url = own.get("endpoint_url")
        self.requested_workers = int(get_cfg(cfg, overrides).workers)  # before BaseTrainer zeroes it on CPU
        # a process group set up before the trainer (Ray Train, torchrun): its ranks, checked before any work
        self.group_ranks = group_size(RANK, LOCAL_RANK, get_cfg(cfg, overrides).device)
        # lists of our own: Ultralytics copies only the dict, and what we add must not stay in the model's
        # callbacks for its next train()
        _callbacks = {k: list(v) for k, v in _callbacks.items()} if _callbacks else None
        super().__init__(cfg, overrides, _callbacks)
        self.callbacks[OwnArgs.event] = [c for c in self.callbacks.get(OwnArgs.event, [])
                                         if not isinstance(c, OwnArgs)]
        if own:
            self.add_callback(OwnArgs.event, OwnArgs(own))
        if _set_loader_epoch not in self.callbacks.get("on_train_epoch_start", []):
            self.add_callback("on_train_epoch_start", _set_loader_epoch)
        warn_ignored(self.args)  # once a run: the loaders are built with warn=False
        if self.group_ranks > 1:
            self.world_size = self.group_ranks  # BaseTrainer counted the devices: 0 for the CPU, 1 for one GPU

    def _cpu_group(self) -> bool:
        return self.group_ranks > 1 and self.device.type == "cpu"

    def _setup_ddp(self):
        """Ultralytics' own (it opens the process group) unless the trainer is in a group already, on
        the device it was given."""
        if self.group_ranks == 1:
            super()._setup_ddp()

    def _setup_train(self):
        if not self._cpu_group():
            return super()._setup_train()
        # Ultralytics wraps the model with a GPU index, which DDP refuses for a CPU model: counted as one
        # rank until _build_train_pipeline (next after the wrap), which wraps it; AMP is off on the CPU
        # (Ultralytics' check says so on rank 0 and broadcasts it), here on every rank at once
        amp, self.args.amp, self.world_size = self.args.amp, False, 1
        try:
            super()._setup_train()
        finally:
            self.args.amp, self.world_size = amp, self.group_ranks

    def _build_train_pipeline(self):
        if self._cpu_group() and self.world_size != self.group_ranks:
            self.world_size = self.group_ranks
            self.model = wrap_cpu_model(self.model, bool(self.args.compile))
        super()._build_train_pipeline()

    def final_eval(self):
        """Ultralytics' own, but on the CPU in a process group: the optimizer taken out of last.pt and
        best.pt (on rank 0) without validating best.pt again."""
        if not self._cpu_group():
            return super().final_eval()
        if RANK == 0:
            last = strip_optimizer(self.last) if self.last.exists() else {}
            if self.best.exists():
                strip_optimizer(self.best, updates={"train_results": last.get("train_results")})
        dist.barrier()  # the weights are final on every rank when train() returns
        LOGGER.warning("yolo_data: best.pt is not validated again on CPUs in a process group (Ultralytics' validator "
                       "asks CUDA for a DDP rank's device); the last epoch's metrics stand")

    def save_model(self):
        """Ultralytics' own, then the files it wrote with the record of the data trained on as their
        top-level key ``yolo_data`` (report.checkpoint: each split's digest and image count), which
        ``yolo-data report DATA --checkpoint best.pt`` compares with the data now.  Ultralytics calls it
        on rank 0 only."""
        # Ultralytics makes the checkpoint dict inside save_model and writes its bytes at once (last.pt,
        # and best.pt or epochN.pt with the same bytes), with no hook in between: so the file it wrote gets
        # the key (nothing in it unpickled, report.checkpoint.with_record) and is written again, with each
        # copy: 0.17 s for a 53 MB checkpoint on 2 CPU cores
        saved = super().save_model()
        record = self.data_record()
        if saved and record and self.last.is_file():
            add_record(self.last, record, copies=(self.best, self.wdir / f"epoch{self.epoch}.pt"))
        return saved

    def data_record(self):
        """The checkpoint's record of the data (report.checkpoint.make_record): the train loader's split
        and the val loader's (under the split's name, ``args.split``) as each was read; made once."""
        if getattr(self, "yolo_data_record", None) is None:
            splits = {}
            for name, loader in (("train", getattr(self, "train_loader", None)),
                                 (self.args.split, getattr(self, "test_loader", None))):
                labels = getattr(getattr(loader, "dataset", None), "split_labels", None)
                if labels is not None:
                    splits[name] = split_record(labels.store, split_fraction(self.args.fraction, name))
            self.yolo_data_record = make_record(self.args.data, splits) if splits else None
        return self.yolo_data_record

    def get_dataset(self):
        """Ultralytics' own for a local dataset; for an NDJSON export, its splits read in place
        (ultralytics_args.ndjson_data); for a yaml in a bucket (``data="s3://..."``), which its
        checks cannot read, the same dict made from yolo_data's reading of the yaml.  With ``classes``
        and ``remap_classes``: the kept classes' names as 0..k-1 and nc k, which the model is made
        from (class_subset).  Its ``channels`` (the yaml's, 3 without the key) are the model's input
        channels (Ultralytics builds it with ``ch=data["channels"]``) and the bands both loaders read."""
        if is_ndjson(str(self.args.data)):  # read in place, not converted by downloading every image
            data = ndjson_data(str(self.args.data), bool(self.args.single_cls), self.endpoint_url)
        elif not is_url(str(self.args.data)):
            data = super().get_dataset()
        else:
            data = remote_dataset(str(self.args.data), bool(self.args.single_cls), self.endpoint_url)
        check_arguments(self.args, data)
        return class_subset(data, self.args.classes, self.remap_classes, bool(self.args.single_cls))

    def _settings(self, mode: str, batch: int):
        settings = loader_settings(self.args, mode, batch, _grid(unwrap_model(self.model).stride),
                                   workers=self.requested_workers, data=self.data, class_balance=self.class_balance,
                                   remap_classes=self.remap_classes, warn=False, endpoint_url=self.endpoint_url)
        # training on a GPU: its batches are decoded and augmented there (yolo_data.device); on the CPU
        # OpenCV's path is the faster one
        device = getattr(self, "device", None)
        if mode == "train" and getattr(device, "type", None) == "cuda":
            settings = settings.replace(device=str(device))
        return settings

    def build_dataset(self, img_path, mode: str = "train", batch=None):
        """An UltralyticsDataset (used on its own by Ultralytics' auto_batch; loaders build theirs)."""
        return UltralyticsDataset(img_path, self._settings(mode, batch or 16), prefix=f"{mode}: ")

    def get_dataloader(self, dataset_path, batch_size: int = 16, rank: int = 0, mode: str = "train"):
        """Ultralytics' extension point: yolo_data's loader of one split.

        Args:
            dataset_path: the split Ultralytics names (a folder, a .txt list, or an ``s3://`` URL).
            batch_size: per rank.
            rank: the local rank under DDP, -1 otherwise.
            mode: 'train' (the training preset) or 'val' (the evaluation preset).

        Returns:
            An UltralyticsLoader whose batches are Ultralytics' dicts.
        """
        return create_loader(dataset_path, self._settings(mode, batch_size), rank=rank, prefix=f"{mode}: ",
                             to_xywhr=_to_xywhr(self.args.task))

    def get_validator(self):
        """The task's YoloDataValidator on the trainer's val loader, with the arguments and loss names
        of the task's own validator."""
        validator = super().get_validator()  # the task's own: it sets the loss names
        ours = _VALIDATORS.get(self.args.task, YoloDataValidator)(self.test_loader, save_dir=self.save_dir,
                                                                  args=copy(validator.args), _callbacks=self.callbacks)
        ours.remap_classes, ours.endpoint_url = self.remap_classes, self.endpoint_url
        return ours


class YoloDataValidator(DetectionValidator):
    """Ultralytics' DetectionValidator reading yolo_data's loader: the same letterbox, rect batches
    (pad 0.5) and linear resize as Ultralytics' own validator, so the same weights give the same
    metrics.  Standalone (``YoloDataValidator(args=dict(model=..., data=...))()``) it builds its loader
    with ``args.rect`` as Ultralytics does (``model.val()`` sets it True).  Made with a pose or obb
    ``task`` in ``args``, it is that task's validator.

    ``classes`` keeps those classes' labels, and ``remap_classes=True`` (ours: ``model.val(...,
    validator=YoloDataValidator, classes=[0, 2], remap_classes=True)`` for a model trained with it)
    makes their ids 0..k-1.  A model with fewer classes than the labels have: the labels of the classes
    it cannot predict are left out, as Ultralytics' validator does.

    Args:
        dataloader: a loader to validate on (a trainer's, from ``get_dataloader``); None: built from
            ``args`` when the validator runs on its own.
        save_dir: where Ultralytics writes the results, as for DetectionValidator.
        args: Ultralytics' validation arguments (a dict or namespace); a dict may also hold yolo_data's
            own ``remap_classes`` (bool, with ``classes``), which Ultralytics does not know (the other
            keys of ultralytics_args.OWN_ARGS are taken out of it and have no effect here).
        _callbacks: Ultralytics' callbacks dict.
    """

    def __new__(cls, dataloader=None, save_dir=None, args=None, _callbacks=None):
        if cls is YoloDataValidator:
            cls = _VALIDATORS.get(_task_of(args), cls)
        return super().__new__(cls)

    def __init__(self, dataloader=None, save_dir=None, args=None, _callbacks=None):
        args, own = take_own_args(args) if isinstance(args, dict) else (args, {})
        self.remap_classes = own.get("remap_classes", False)
        self.endpoint_url = own.get("endpoint_url")
        super().__init__(dataloader, save_dir, args, _callbacks)

    def __call__(self, trainer=None, model=None):
        data = str(getattr(self.args, "data", ""))
        if trainer is None and (is_url(data) or is_ndjson(data)):
            with _reading_own_data(bool(getattr(self.args, "single_cls", False)), self.endpoint_url):
                return super().__call__(trainer, model)
        return super().__call__(trainer, model)

    def _settings(self, batch: int):
        return loader_settings(self.args, "val", batch, _grid(self.stride), workers=self.args.workers,
                               rect=self.args.rect, data=self.data, remap_classes=self.remap_classes,
                               endpoint_url=self.endpoint_url)

    def build_dataset(self, img_path, mode: str = "val", batch=None):
        """An UltralyticsDataset of ``img_path`` with the evaluation preset."""
        return UltralyticsDataset(img_path, self._settings(batch or self.args.batch), prefix="val: ")

    def get_dataloader(self, dataset_path, batch_size: int):
        """Ultralytics' extension point: yolo_data's evaluation loader of one split, without the labels
        of classes the model cannot predict.

        Args:
            dataset_path: the split Ultralytics names (a folder, a .txt list, or an ``s3://`` URL).
            batch_size: the batch (a standalone validator runs on one process).

        Returns:
            An UltralyticsLoader whose batches are Ultralytics' dicts.
        """
        settings = self._settings(batch_size)
        classes, remap = validation_classes(self.args.classes, self.remap_classes, int(self.data["nc"]),
                                            len(self.names) if self.names else None, bool(self.args.single_cls))
        if (classes, remap) != (settings.index.classes, settings.index.remap_classes):
            LOGGER.warning(f"yolo_data: the model has {len(self.names)} classes; labels of the classes it cannot "
                           "predict are left out, as Ultralytics' validator does")
            settings = settings.replace(classes=classes, remap_classes=remap)
        differ = [] if self.args.single_cls else names_differ(self.names, self.data["names"], classes, remap)
        if differ:
            LOGGER.warning(f"yolo_data: the model's class names are not its labels' ({', '.join(differ)}, as id: "
                           "model / labels); a model trained with remap_classes is validated with the same classes "
                           "and remap_classes=True")
        return create_loader(dataset_path, settings, rank=-1, prefix="val: ", to_xywhr=_to_xywhr(self.args.task))


class YoloDataSegmentationValidator(YoloDataValidator, SegmentationValidator):
    """Ultralytics' SegmentationValidator reading yolo_data's loader (``masks`` with ``overlap_mask`` and
    ``mask_ratio``)."""


class YoloDataPoseValidator(YoloDataValidator, PoseValidator):
    """Ultralytics' PoseValidator reading yolo_data's loader (keypoints (n, K, 3) normalised)."""


class YoloDataOBBValidator(YoloDataValidator, OBBValidator):
    """Ultralytics' OBBValidator reading yolo_data's loader (``bboxes`` (n, 5) xywhr, by Ultralytics'
    own conversion of the corners)."""


class YoloDataSegmentationTrainer(YoloDataTrainer, SegmentationTrainer):
    """Ultralytics' SegmentationTrainer with yolo_data's loaders."""


class YoloDataPoseTrainer(YoloDataTrainer, PoseTrainer):
    """Ultralytics' PoseTrainer with yolo_data's loaders (``kpt_shape`` and ``flip_idx`` from the yaml)."""


class YoloDataOBBTrainer(YoloDataTrainer, OBBTrainer):
    """Ultralytics' OBBTrainer with yolo_data's loaders."""


_TRAINERS = {"segment": YoloDataSegmentationTrainer, "pose": YoloDataPoseTrainer, "obb": YoloDataOBBTrainer}
_VALIDATORS = {"segment": YoloDataSegmentationValidator, "pose": YoloDataPoseValidator, "obb": YoloDataOBBValidator}
