"""The equations take one candidate's numbers or a column of them (numpy arrays): a
scheduler ranks a thousand decode instances in one pass. Checks look at the extremes."""

from __future__ import annotations

import numpy as np


def lowest(x):
    return x.min() if isinstance(x, np.ndarray) else x


def highest(x):
    return x.max() if isinstance(x, np.ndarray) else x


def at_least_zero(x):
    """max(0, x) for a number or elementwise for an array."""
    return np.maximum(x, 0) if isinstance(x, np.ndarray) else max(0, x)
