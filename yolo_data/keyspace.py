"""Where to cut a folder's keys so that its listing runs in several ranges at once.

S3 lists one folder a page (1,000 keys) after another, each page asking for the keys after the last one
it gave; a listing may also start after any key (``start-after``).  So the keys after ``last`` can be
cut at a key ``m``: one listing goes on up to ``m``, another starts after it.  Where the keys lie is
not known before they are listed; ``cut_after`` guesses from the page just listed, reading a key as a
number in base 96 (the printable ASCII characters, anything above them as one more digit).  Sequential
names (``000123.jpg``) are then evenly spread over those numbers, and random ones (hex hashes) within a
few times, so the distance a page covered predicts about how far the next pages reach.

A guess only decides how the work is shared: whatever ``m`` is, the two ranges together hold every key
after ``last`` exactly once.  Pure functions of their arguments.
"""
from __future__ import annotations

from typing import Optional

LOW, BASE = 0x20, 96  # ' ' is digit 0, '~' digit 94, DEL and anything above it digit 95


def _number(key: str, digits: int) -> int:
    value = 0
    for c in key[:digits].ljust(digits, chr(LOW)):
        value = value * BASE + min(max(ord(c) - LOW, 0), BASE - 1)
    return value


def _key(value: int, digits: int) -> str:
    out = []
    for _ in range(digits):
        value, d = divmod(value, BASE)
        out.append(chr(LOW + min(d, BASE - 2)))  # printable ASCII only: a valid key in any encoding
    return "".join(reversed(out)).rstrip(chr(LOW))


def cut_after(first: str, last: str, pages: float, upto: Optional[str] = None) -> Optional[str]:
    """A key ``m`` with ``last < m`` (and ``m < upto`` when given), about ``pages`` times the distance
    from ``first`` to ``last`` (the page just listed) past ``last``, and at most halfway to ``upto``;
    None where no such key is found (``last`` and ``upto`` too close)."""
    digits = max(len(first), len(last), len(upto or "")) + 2
    lo, step = _number(last, digits), max(_number(last, digits) - _number(first, digits), 1)
    value = lo + int(step * pages) if pages != float("inf") else None
    if upto is not None:
        half = (lo + _number(upto, digits)) // 2
        value = half if value is None else min(value, half)
    if value is None:
        return None
    m = _key(value, digits)
    return m if last < m and (upto is None or m < upto) else None
