"""Turn a list of items into a batch: YOLOv5's collate_fn and its 'quad' variant."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.data import get_worker_info

from ..device.plan import BatchPlan, ItemPlan
from ..runtime.torch_private import new_shared_storage
from ..sampling.seeds import quad_rng
from .batchmemory import batch_bytes, transport


def one_batch(tensors) -> Optional[torch.Tensor]:
    """The (B, ...) tensor whose consecutive slots the B ``tensors`` are, or None.  Items of a batch made
    by ``YoloDataset.__getitems__`` are written into one such tensor (see tensors.BatchImages), which
    then needs no stacking.  In a worker its storage may be a pool buffer, longer than the batch."""
    first = tensors[0]
    n, size = len(tensors), first.numel()
    storage = first.untyped_storage()
    whole = batch_bytes(storage) or storage.nbytes()
    if whole != n * size * first.element_size() or not first.is_contiguous():
        return None
    for k, t in enumerate(tensors):
        if (t.shape != first.shape or t.dtype != first.dtype or not t.is_contiguous()
                or t.untyped_storage().data_ptr() != storage.data_ptr() or t.storage_offset() != k * size):
            return None
    return first.as_strided((n, *first.shape), (size, *first.stride()), 0)


def stack(tensors) -> torch.Tensor:
    """torch.stack, straight into shared memory inside a DataLoader worker: the batch then crosses to
    the main process without being copied once more (as torch's default_collate does).  Tensors that
    already are the slots of one batch tensor are handed on as that tensor, without a copy."""
    whole = one_batch(tensors)
    if whole is not None:
        return transport(whole)  # in a worker, a pooled buffer leaves as such (batchmemory.py)
    out = None
    if get_worker_info() is not None:
        # allocated in shared memory directly (share_memory_() on a fresh tensor would copy it there)
        first = tensors[0]
        storage = new_shared_storage(len(tensors) * first.numel() * first.element_size())
        out = torch.empty(0, dtype=first.dtype).set_(storage, 0, (len(tensors), *first.shape))
    return torch.stack(tensors, 0, out=out)


def collate_fn(batch):
    """Stack images (B, C, H, W) uint8 (uint16 for 16-bit datasets); concatenate targets (N, 6) with
    column 0 set to each image's index in the batch; paths and shapes as tuples.  Items with a fifth
    part (per-object extras: name -> (n, ...) tensor, row i beside target row i; sample.extras_of) give
    a fifth: name -> (N, ...), the rows in the targets' order."""
    ims, targets, paths, shapes, *extras = zip(*batch)
    for i, t in enumerate(targets):
        t[:, 0] = i
    # a loader with a device stage: the items' plans become the batch's, in place of its image tensor
    out = BatchPlan.join(ims) if isinstance(ims[0], ItemPlan) else stack(ims), torch.cat(targets, 0), paths, shapes
    return out + (join_objects(extras[0]),) if extras else out


def join_objects(parts) -> dict:
    """Per-object extras of a batch's items joined by name (every item carries the same names)."""
    names = sorted(parts[0])
    if any(sorted(p) != names for p in parts):
        raise ValueError(f"the items of a batch carry different per-object extras: {[sorted(p) for p in parts]}")
    return {k: torch.cat([p[k] for p in parts], 0) for k in names}


class QuadCollate:
    """YOLOv5's collate_fn4: each group of 4 items becomes one image of twice the size, either the
    first item upsampled 2x (bilinear) or the 4 tiled 2x2, with even odds.  B items -> B // 4 images
    (as in YOLOv5, the last B % 4 items are not used).

    The coin for a group is drawn from (seed, epoch, the group's paths), never from global state, so
    the batch is the same whichever worker collates it.  ``epoch``: the dataset's SharedEpoch.
    """

    def __init__(self, seed: int, epoch):
        self.seed, self.epoch = seed, epoch

    def __call__(self, batch):
        if any(len(item) > 4 for item in batch):
            raise ValueError("quad=True (YOLOv5's collate_fn4) makes detection batches only: these items "
                             "carry per-object extras; use quad=False")
        ims, targets, paths, shapes = zip(*batch)
        n = len(ims) // 4
        out_ims, out_targets = [], []
        down = torch.tensor([[0.0, 0, 0, 1, 0, 0]])  # one image height lower (y + 1 before halving)
        right = torch.tensor([[0.0, 0, 1, 0, 0, 0]])
        half = torch.tensor([[1, 1, 0.5, 0.5, 0.5, 0.5]])
        for g in range(n):
            i = 4 * g
            if quad_rng(self.seed, self.epoch.get(), paths[i:i + 4]).random() < 0.5:
                im = F.interpolate(ims[i][None].float(), scale_factor=2.0, mode="bilinear", align_corners=False)
                top = 65535 if ims[i].dtype == torch.uint16 else 255  # the dtype's largest value
                out_ims.append(im[0].round().clamp(0, top).to(ims[i].dtype))
                out_targets.append(targets[i])
            else:
                # layout [[0, 2], [1, 3]]: items 1 and 3 sit one image lower, 2 and 3 one image right
                out_ims.append(torch.cat((torch.cat((ims[i], ims[i + 1]), 1), torch.cat((ims[i + 2], ims[i + 3]), 1)), 2))
                out_targets.append(torch.cat((targets[i], targets[i + 1] + down, targets[i + 2] + right,
                                              targets[i + 3] + down + right), 0) * half)
        for k, t in enumerate(out_targets):
            t[:, 0] = k
        return stack(out_ims), torch.cat(out_targets, 0), paths[:n], shapes[:n]
