"""Training augmentation with explicit random generators: the sample, mosaic, perspective, colour, their order.

Modules, in the order data flows through them:

    hyp          YOLOv5's hyp keys
    sample       one sample between steps: image, boxes, per-object extras
    mosaic       mosaic 4 and 9, mixup, cutmix, copy-paste
    perspective  random perspective and flips
    photometric  HSV gains (3 channels); per-band gains and offsets (other channels)
    albument     the optional Albumentations step
    pipeline     the order of the steps for one item
    augstate     hyp and mosaic switches that reach running workers
"""
from .albument import AlbumentationsStep
from .augstate import AugmentControl, SharedSettings, TrainSettings
from .hyp import AugmentConfig, load_hyp
from .mosaic import (copy_paste, cutmix, mixup, mosaic4, mosaic4_resized, mosaic9, mosaic_border, mosaic_centre,
    paste_objects)
from .perspective import (PerspectiveParams, box_candidates, draw_perspective, flip_lr, flip_ud, perspective_matrix,
    random_perspective, warp_boxes, warp_sample)
from .photometric import BandGains, apply_band_gains, apply_hsv, augment_hsv, band_tables, draw_band_gains, hsv_tables
from .pipeline import draw_finish, flip_boxes, item_rng, mosaic_with_mixup, single_image_geometry
from .sample import Points, Sample, box_polygons, join_extras

__all__ = ["AugmentConfig", "load_hyp", "Points", "Sample", "box_polygons", "join_extras", "copy_paste", "cutmix",
           "mixup", "mosaic4", "mosaic4_resized", "mosaic9", "mosaic_border", "mosaic_centre",
           "paste_objects", "PerspectiveParams", "box_candidates", "draw_perspective", "flip_lr",
           "flip_ud", "perspective_matrix", "random_perspective", "warp_boxes", "warp_sample",
           "apply_hsv", "augment_hsv", "hsv_tables", "BandGains", "apply_band_gains", "band_tables",
           "draw_band_gains", "AlbumentationsStep", "draw_finish",
           "flip_boxes", "item_rng", "mosaic_with_mixup", "single_image_geometry", "AugmentControl",
           "SharedSettings", "TrainSettings"]
