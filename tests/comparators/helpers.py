"""Shared helpers of the comparator tests: exact enumeration of designs and feasible sets."""

from __future__ import annotations

import itertools

import numpy as np

import shared


def feasible_allocations(lower, upper, total):
    """Every integer vector ``lower <= n <= upper`` with ``sum(n) <= total``."""
    ranges = [range(int(lo), int(hi) + 1) for lo, hi in zip(lower, upper, strict=True)]
    return [np.array(n) for n in itertools.product(*ranges) if sum(n) <= total]


def srswor_support(finished_row, k):
    """All ``(mask, prob)`` of SRSWOR of ``k`` unfinished units, finished always in."""
    return list(zip(*shared.srswor_support(finished_row, k), strict=True))


def bernoulli_support(p):
    """All ``(mask, prob)`` of independent Bernoulli(p_i) draws (prob-0 masks dropped)."""
    return list(zip(*shared.bernoulli_support(p), strict=True))


def moments(support, G):
    """``(pi, joint)`` of an enumerated support."""
    pi = np.zeros(G)
    joint = np.zeros((G, G))
    for m, prob in support:
        pi += prob * m
        joint += prob * np.outer(m, m)
    return pi, joint
