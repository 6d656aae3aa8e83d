"""The dataset report: figures, duplicates, pictures, the page; and where a training loader's time goes.

Modules, in the order data flows through them:

    compose    `yolo-data report`: what a dataset holds and what is wrong with it
    datastats  figures of a split from its label store
    dedupe     duplicate images within and across splits
    nearpairs  near-identical hashes among many, by multi-index hashing
    sequence   frames of recordings from numbered file names, which recordings are videos
    leakage    val and test frames of videos within k frames of a training frame (sequence-leakage)
    plots      a batch as a grid, objects of one class as a strip
    html       the report as one self-contained page
    checkpoint which data a checkpoint's model was trained on: its record, read safely, against the splits now
    bench      `yolo-data bench`: time per stage, the loader's rate against a training step's, the workers it needs
"""
from .compose import ReportOptions, make_report, read_splits, write, write_report
from .dedupe import DuplicateGroup, ImagePrints, find_duplicates, fingerprint_images, labels_agree
from .nearpairs import hamming, near_pairs
from .plots import class_colour, draw_batch

__all__ = ["ReportOptions", "make_report", "read_splits", "write", "write_report", "DuplicateGroup", "ImagePrints",
           "find_duplicates", "fingerprint_images", "hamming", "labels_agree", "near_pairs",
           "class_colour", "draw_batch"]
