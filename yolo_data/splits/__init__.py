"""New train/val/test splits without leakage: every group of related images (one picture re-encoded, a
recording, neighbouring frames, a user's pattern) on one side, each class's share as asked where the groups allow.

    groups    the ways of grouping images, and their join
    assign    whole groups to splits, shares of images and of each class's objects near the asked fractions
    plan      split_dataset: pool a dataset's images, group, assign, the summary figures
    write     the lists, data.yaml and split.json, into the folder the user names
    command   ``yolo-data split``
"""
from .groups import GroupBy, group_images
from .plan import SplitOptions, SplitPlan, split_dataset
from .write import write_split

__all__ = ["GroupBy", "group_images", "SplitOptions", "SplitPlan", "split_dataset", "write_split"]
