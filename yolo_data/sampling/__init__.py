"""Which images each rank loads, in which order, per epoch: the sampler, its seeds and weights, what one run
shares.

Modules, in the order data flows through them:

    seeds     the seeding rules: a seed checked; (seed, epoch, ...) to the generator of each random decision
    sampler   the epoch's global order cut into steps and ranks; the item key; resume points
    balance   class-balanced repeat factors
    weights   YOLOv5's class and image weights
    runstate  what one run shares (the epoch, the partner group), each with one writer
"""
from .balance import (class_factors, class_image_counts, epoch_length, image_factors, repeat_draws, repeat_factors,
    sampled_counts, systematic_counts, threshold_of)
from .runstate import RunState
from .sampler import ItemKey, ShardSampler, SharedEpoch, YoloSampler, digest, partner_group_size, weighted_draws
from .seeds import SEED_SPAN, check_seed, epoch_rng, item_rng, quad_rng, seed_entropy, split_rng
from .weights import labels_to_class_weights, labels_to_image_weights

__all__ = ["SEED_SPAN", "check_seed", "epoch_rng", "item_rng", "quad_rng", "seed_entropy", "split_rng", "ItemKey", "ShardSampler",
           "SharedEpoch", "YoloSampler", "digest", "partner_group_size", "weighted_draws", "class_factors",
           "class_image_counts", "epoch_length", "image_factors", "repeat_draws", "repeat_factors",
           "sampled_counts", "systematic_counts", "threshold_of", "labels_to_class_weights",
           "labels_to_image_weights", "RunState"]
