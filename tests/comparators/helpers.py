"""Shared helpers of the comparator tests: exact enumeration of designs and feasible sets."""

from __future__ import annotations

import itertools

import numpy as np


def feasible_allocations(lower, upper, total):
    """Every integer vector ``lower <= n <= upper`` with ``sum(n) <= total``."""
    ranges = [range(int(lo), int(hi) + 1) for lo, hi in zip(lower, upper, strict=True)]
    return [np.array(n) for n in itertools.product(*ranges) if sum(n) <= total]


def srswor_support(finished_row, k):
    """All ``(mask, prob)`` of SRSWOR of ``k`` unfinished units, finished always in."""
    idx = np.flatnonzero(~finished_row)
    combos = list(itertools.combinations(idx, k))
    out = []
    for c in combos:
        m = finished_row.copy()
        m[list(c)] = True
        out.append((m, 1.0 / len(combos)))
    return out


def bernoulli_support(p):
    """All ``(mask, prob)`` of independent Bernoulli(p_i) draws (prob-0 masks dropped)."""
    p = np.asarray(p, dtype=float)
    out = []
    for bits in itertools.product((False, True), repeat=p.size):
        m = np.array(bits)
        prob = float(np.prod(np.where(m, p, 1.0 - p)))
        if prob > 0:
            out.append((m, prob))
    return out


def moments(support, G):
    """``(pi, joint)`` of an enumerated support."""
    pi = np.zeros(G)
    joint = np.zeros((G, G))
    for m, prob in support:
        pi += prob * m
        joint += prob * np.outer(m, m)
    return pi, joint
