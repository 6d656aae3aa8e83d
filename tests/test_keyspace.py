"""keyspace.cut_after: where one folder's listing is cut into ranges listed at once."""
import bisect
import hashlib
import random

from yolo_data.keyspace import cut_after


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
            m = cut_after(first, last, pages, bound)
            if m is not None:
                assert last < m and (bound is None or m < bound), (first, last, bound, m)
                assert all(" " <= c <= "~" for c in m)


def test_sequential_names_are_cut_about_the_asked_pages_further_on():
    keys = [f"train/images/{i:012d}.jpg" for i in range(1, 20001)]
    m = cut_after(keys[0], keys[999], 4.0)  # the first page went from keys[0] to keys[999]
    assert 3900 <= keys_between(keys, keys[999], m) <= 4100


def test_random_hex_names_are_cut_within_a_few_times_the_asked_pages():
    # hex digits are not one run of ASCII ('9' and 'a' are 40 apart), so the guess is rougher than for
    # sequential names; a guess only shares the work, it never loses a key
    keys = sorted(hashlib.sha1(str(i).encode()).hexdigest() + ".jpg" for i in range(100_000))
    m = cut_after(keys[0], keys[999], 8.0)
    assert 2000 <= keys_between(keys, keys[999], m) <= 16000


def test_a_bounded_range_is_cut_halfway():
    keys = [f"{i:06d}" for i in range(10_000)]
    m = cut_after(keys[2000], keys[2999], float("inf"), keys[8999])
    assert abs(keys_between(keys, keys[2999], m) - 3000) <= 30


def test_no_cut_where_no_key_fits_between():
    assert cut_after("a", "b", float("inf"), "b ") is None
    assert cut_after("a", "b", 2.0, "b") is None
    assert cut_after("a", "b", float("inf")) is None  # to the end, a halfway cut has no end
