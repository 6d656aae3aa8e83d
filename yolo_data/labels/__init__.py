"""A split's labels: verified, scanned in parallel, held in flat arrays, cached, loaded once per job.

Modules, in the order data flows through them:

    verify      one image and its labels to a record or a named problem
    scan        every pair of a split, in parallel
    store       the split's labels in flat NumPy arrays
    cache       the label cache: fingerprint, contents, load and save
    loadorscan  in one process: a fresh cache where one is kept, else a scan of the files
    split       once per node and once per job: rank 0 loads or scans, the others get its cache file
    summary     the line each split prints, and its first problems
"""
from .cache import folder_cache_file
from .scan import default_workers, scan_pairs
from .split import SplitLabels, load_split, publish
from .store import ImageFiles, Keypoints, LabelFiles, LabelStore, Labels, LazySequence, Segments
from .summary import console, plural, printing_rank, progress_bar, split_summary
from .verify import PairRecord, image_size, verify_pair

__all__ = ["PairRecord", "image_size", "verify_pair", "default_workers", "scan_pairs", "ImageFiles", "Keypoints",
           "LabelFiles", "LabelStore", "Labels", "LazySequence", "Segments", "folder_cache_file",
           "SplitLabels", "load_split", "publish", "console", "plural", "printing_rank", "progress_bar",
           "split_summary"]
