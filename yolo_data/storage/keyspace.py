"""Where to cut a folder's keys so that its listing runs in several ranges at once.

S3 lists one folder a page (1,000 keys) after another, each page asking for the keys after the last one
it gave; a listing may also start after any key (``start-after``).  So the keys after ``last`` can be
cut at a key ``m``: one listing goes on up to ``m``, another starts after it.  Where the keys lie is
not known before they are listed; ``Digits.of(page)`` learns from the page just listed what each
character position of its keys holds (decimal digits, hex digits, letters, anything), and ``cut_after``
reads keys as numbers in those digits.  Sequential names (``000123.jpg``) then count as numbers do
and random ones (hashes) are evenly spread, so the distance the page covered predicts how far the next
pages reach.

A guess only decides how the work is shared: whatever ``m`` is, the two ranges together hold every key
after ``last`` exactly once.  Pure functions of their arguments.
"""
from __future__ import annotations

import string
from bisect import bisect_left
from typing import List, Optional, Sequence

VARIED = 4  # characters at a position of a page that show which digits it counts in
# the digits a position is read in: the first of these that holds every character the page had there
CLASSES = (string.digits, string.digits + "abcdef", string.digits + "ABCDEF", string.digits + string.ascii_lowercase,
           string.digits + string.ascii_uppercase, string.digits + string.ascii_uppercase + string.ascii_lowercase)


class Digits:
    """The digits of each character position: ``places[i]``, a sorted string."""

    def __init__(self, places: List[str], rest: str):
        self.places, self.rest = places, rest  # rest: the digits of positions past the page's longest key

    @classmethod
    def of(cls, keys: Sequence[str]) -> "Digits":
        """From a page's keys: a position counts in the first of CLASSES that holds every character the
        page had there (else in every character the page used).  A page covers a narrow stretch of its
        folder, so its leading positions barely vary ('0' and '2' in hex hashes 0000... to 0281...):
        a position with fewer than VARIED characters counts as the nearest varied one after it does,
        when that holds its characters."""
        every = "".join(sorted(set("".join(keys))))
        seen: List[set] = []
        for k in keys:
            for i, c in enumerate(k):
                if i == len(seen):
                    seen.append(set())
                seen[i].add(c)
        places, wide = [every] * len(seen), None
        for i in reversed(range(len(seen))):
            own = next((d for d in CLASSES if seen[i] <= set(d)), every)
            if len(seen[i]) >= VARIED:
                wide = own
            places[i] = wide if wide is not None and len(seen[i]) < VARIED and seen[i] <= set(wide) else own
        return cls(places, every)

    def base(self, i: int) -> str:
        return self.places[i] if i < len(self.places) else self.rest

    def number(self, key: str, width: int) -> int:
        """``key`` as a number of ``width`` places: place i's digit is the character's rank among
        ``base(i)`` (one not in it: where it would go, at most the last), a missing place 0."""
        value = 0
        for i in range(width):
            b = self.base(i)
            value = value * len(b) + (min(bisect_left(b, key[i]), len(b) - 1) if i < len(key) else 0)
        return value

    def key(self, value: int, width: int) -> str:
        out = []
        for i in reversed(range(width)):
            b = self.base(i)
            value, d = divmod(value, len(b))
            out.append(b[d])
        return "".join(reversed(out))


def cut_after(page: Sequence[str], pages: float, upto: Optional[str] = None) -> Optional[str]:
    """A key ``m`` after the last of ``page`` (the keys just listed, in order) and before ``upto`` when
    given: about ``pages`` times the distance the page covered past its last key, and at most halfway
    to ``upto``; None where no such key is found (the last key and ``upto`` too close, or ``pages``
    infinite without ``upto``)."""
    first, last = page[0], page[-1]
    digits = Digits.of(page)
    width = max(len(first), len(last), len(upto or "")) + 2
    lo = digits.number(last, width)
    value = None if pages == float("inf") else lo + int(max(lo - digits.number(first, width), 1) * pages)
    if upto is not None:
        half = (lo + digits.number(upto, width)) // 2
        value = half if value is None else min(value, half)
    if value is None:
        return None
    m = digits.key(value, width)
    return m if last < m and (upto is None or m < upto) else None
