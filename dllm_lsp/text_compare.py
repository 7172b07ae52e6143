"""How much two versions of a text share at either end, by bisection over slice comparisons
(the comparisons run in C, so a 100 KB text costs microseconds)."""
from __future__ import annotations


def common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def common_suffix_length(a: str, b: str, limit: int) -> int:
    """Length of the common suffix, at most `limit`."""
    low, high = 0, min(limit, len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle:] == b[len(b) - middle:]:
            low = middle
        else:
            high = middle - 1
    return low
