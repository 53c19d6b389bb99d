"""Spans of time as sorted lists of (start, end) (pure)."""

from __future__ import annotations


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted spans with the overlapping ones joined."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap(xs: list[tuple[float, float]], ys: list[tuple[float, float]]
             ) -> list[tuple[float, float]]:
    """Where two sorted, disjoint lists of spans both hold."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out
