"""Frames of recordings from numbered names (yolo_data.report.sequence): the recording and frame of a name, runs
of neighbouring frames, val frames near a training frame, and which recordings the pictures show to be videos
(generated clips; tiger-pose, one video, against coco128 and BCCD, photos numbered by id)."""
from __future__ import annotations

import glob

import numpy as np
import pytest

from conftest import SHARED
from recordings import write_recordings
from yolo_data.report.dedupe import fingerprint_images
from yolo_data.report.sequence import frame_runs, near_training, parse_frames, recording_of, video_recordings


@pytest.mark.parametrize("path, key, frame", [
    ("clips/clip3_000117.jpg", "clips/clip3_#", 117),
    ("d/images/train/frame_0042_left.png", "d/images/frame_#_left", 42),
    ("d/images/val2017/frame_0043_left.png", "d/images/frame_#_left", 43),
    ("s3://b/ds/valid/images/image_4_png.rf.21970feeea4c29934b44fcdde32df1fc.jpg", "s3://b/ds/images/image_#", 4),
    ("x/Frame_7.jpg", "x/Frame_#", 7),
    ("x/photo.jpg", None, -1),
    ("x/trainer/a1.jpg", "x/trainer/a#", 1),  # a folder that only begins with a split's name stays
])
def test_recording_of(path, key, frame):
    assert recording_of(path) == (key, frame)


def test_runs_and_near_training():
    paths = [f"v/a_{i}.jpg" for i in (1, 2, 3, 20, 21, 40)] + ["v/b_2.jpg", "v/photo.jpg", "v/a_5.jpg"]
    frames = parse_frames(paths)
    assert frames.names == ["v/a_#", "v/b_#"]
    runs = frame_runs(frames, k=2)
    # a_1 a_2 a_3 a_5 | a_20 a_21 | a_40 | b_2 | photo
    assert len(set(runs.tolist())) == 5
    assert runs[0] == runs[1] == runs[2] == runs[8] and runs[3] == runs[4]
    assert len({runs[5], runs[6], runs[7], runs[0], runs[3]}) == 5
    split = np.array([0, 1, 0, 1, 0, 1, 1, 1, 1])
    near = near_training(frames, split, k=2)
    # a_2 (between a_1 and a_3), a_20 (a_21 trains), a_5 (a_3 is 2 away); a_40, b_2 and photo have none
    assert near.tolist() == [False, True, False, True, False, False, False, False, True]
    assert near_training(frames, split, k=1).tolist() == [False, True, False, True, False, False, False, False, False]
    # only the recordings asked for
    assert not near_training(frames, split, k=2, recordings=np.array([False, True])).any()


def test_generated_clips_are_videos(tmp_path):
    files = write_recordings(tmp_path, clips=4, frames=8)
    prints = fingerprint_images(files, workers=2)
    frames = parse_frames(files)
    assert len(frames.names) == 4
    assert video_recordings(frames, prints.phash, prints.ok).all()
    # the same clips' frames shuffled between clips are not: neighbours are then other scenes
    shuffled = np.random.default_rng(0).permutation(len(files))
    assert not video_recordings(frames, prints.phash[shuffled], prints.ok).any()


@pytest.mark.skipif(not (SHARED / "tiger-pose").is_dir(), reason="../shared/datasets is absent")
def test_real_video_against_numbered_photos():
    def judge(pattern):
        files = sorted(glob.glob(str(SHARED / pattern)))
        split = np.array([0 if "/train2017/" in f else 1 for f in files])
        frames = parse_frames(files)
        prints = fingerprint_images(files, workers=2)
        videos = video_recordings(frames, prints.phash, prints.ok)
        return videos, near_training(frames, split, recordings=videos), split

    videos, near, split = judge("tiger-pose/images/*/*.jpg")  # one video, its frames drawn at random for val
    assert videos.tolist() == [True] and near.sum() == (split == 1).sum() == 53
    for photos in ("coco128/images/*/*.jpg", "bccd/images/*/*.jpg"):  # numbered by id: not videos
        videos, near, _ = judge(photos)
        assert not videos.any() and not near.any()
