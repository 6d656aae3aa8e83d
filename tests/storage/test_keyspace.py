"""keyspace.cut_after: where one folder's listing is cut into ranges listed at once."""
import bisect
import hashlib
import random

import pytest

from yolo_data.storage.keyspace import CLASSES, cut_after


def keys_between(keys, lo, hi):
    """How many of the sorted ``keys`` are in (lo, hi]."""
    return bisect.bisect_right(keys, hi) - bisect.bisect_right(keys, lo)


def test_a_cut_lies_after_the_last_key_and_before_the_bound_in_printable_ascii():
    rng = random.Random(0)
    alphabet = "0123456789abcdefXYZ_-. /~é中"
    for _ in range(3000):
        ks = sorted("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3))
        first, last, upto = ks
        for pages, bound in ((2.0, None), (float("inf"), upto), (64.0, upto)):
            m = cut_after([first, last], pages, bound)
            if m is not None:
                assert last < m and (bound is None or m < bound), (first, last, bound, m)
                assert set(m) <= set(first + last + "".join(CLASSES))  # the keys' own characters, or digits


@pytest.mark.parametrize("page", [0, 3, 7])
def test_sequential_names_are_cut_about_the_asked_pages_further_on(page):
    keys = [f"train/images/{i:012d}.jpg" for i in range(1, 20001)]
    listed = keys[page * 1000:page * 1000 + 1000]  # the page just listed
    m = cut_after(listed, 4.0)
    assert 3900 <= keys_between(keys, listed[-1], m) <= 4100


def test_random_hex_names_are_cut_about_the_asked_pages_further_on():
    keys = sorted(hashlib.sha1(str(i).encode()).hexdigest() + ".jpg" for i in range(100_000))
    m = cut_after(keys[:1000], 8.0)
    assert 7000 <= keys_between(keys, keys[999], m) <= 9000


def test_a_bounded_range_is_cut_halfway():
    keys = [f"{i:06d}" for i in range(10_000)]
    m = cut_after(keys[2000:3000], float("inf"), keys[8999])
    assert abs(keys_between(keys, keys[2999], m) - 3000) <= 30


def test_no_cut_where_no_key_fits_between():
    assert cut_after(["a", "b"], float("inf"), "b" + chr(0)) is None
    assert cut_after(["a", "b"], 2.0, "b") is None
    assert cut_after(["a", "b"], float("inf")) is None  # to the end, a halfway cut has no end
