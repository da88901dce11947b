"""Input validation and randomness plumbing shared by every module.

Every public function validates its input here, so that each rule is written once and each
error names the argument, the offending value and the rule that was broken.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

RNGLike = int | np.random.Generator | np.random.SeedSequence | None

#: Largest float64 table, in bytes, that a function of the package builds (1 GiB). The sizes
#: that would pass it are refused before anything is allocated (:func:`check_table_size`),
#: with a ``ValueError`` naming the size and this limit, instead of a ``MemoryError`` (or
#: minutes of swapping) deep inside numpy. 1 GiB, because a function holds a few tables of the
#: size it checks at once (the allocation solver about four ``(B, G, G)`` ones), so its peak
#: stays within a few GiB: ``G <= 11585`` for one ``G x G`` table, ``B G**2 <= 2**27``.
MAX_TABLE_BYTES = 2**30


def as_generator(rng: RNGLike) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from an int seed, a Generator, a SeedSequence or None.

    Mirrors ``numpy.random.default_rng``: no global random state is ever touched.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (bool, np.bool_)):
        raise ValueError(f"rng must be an int seed, a Generator, a SeedSequence or None; "
                         f"got the bool {rng!r}")
    if isinstance(rng, numbers.Integral) and rng < 0:
        raise ValueError(f"rng must be a non-negative int seed (numpy's default_rng takes no "
                         f"negative seeds); got {rng}")
    if rng is None or isinstance(rng, (numbers.Integral, np.random.SeedSequence)):
        return np.random.default_rng(rng)
    raise ValueError(
        f"rng must be an int seed, a numpy.random.Generator, a SeedSequence or None; "
        f"got {type(rng).__name__}"
    )


def _first_bad(x: np.ndarray, bad: np.ndarray) -> str:
    idx = np.argwhere(bad)[0]
    where = tuple(int(i) for i in idx)
    if len(where) == 1:
        where = where[0]  # type: ignore[assignment]
    return f"{name_index(where)} = {x[tuple(idx)].item()!r}"


def name_index(where: object) -> str:
    return f"[{where}]" if not isinstance(where, tuple) else "[" + ", ".join(map(str, where)) + "]"


def as_real_array(name: str, x: object) -> np.ndarray:
    """Return ``x`` as a float64 array, accepting only real numbers (int or float dtypes).

    ``np.asarray(x, dtype=float)`` silently drops imaginary parts, parses numeric strings
    (``"0.5"``), unpacks object arrays and reads ``True`` as 1.0; each of these hides a
    caller's mistake, so each raises ``TypeError`` naming ``name`` and the dtype instead.
    Ragged nested lists raise ``ValueError``.
    """
    if x is None:
        raise TypeError(f"{name} must be an array of real numbers; got None")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged nested sequences
        raise ValueError(
            f"{name} must be a rectangular array of real numbers; could not convert it ({exc})"
        ) from None
    kind = arr.dtype.kind
    if kind in "iuf":
        return arr.astype(np.float64, copy=False)
    if kind == "c":
        rule = "real (a complex dtype would silently drop the imaginary part)"
    elif kind == "b":
        rule = "numeric, not boolean (cast with .astype(float) if 0/1 values are meant)"
    elif kind in "US":
        rule = "numeric, not strings (parse them first)"
    elif kind == "O":
        rule = "numeric; an object array holds None, mixed types or ragged rows"
    else:
        rule = "numeric (int or float)"
    raise TypeError(f"{name} must be {rule}; got dtype {arr.dtype}")


def check_symmetric(name: str, x: np.ndarray, tol: float | np.ndarray, rule: str) -> np.ndarray:
    r"""The one check that ``(..., G, G)`` matrices are symmetric: ``|x_ij - x_ji| <= tol``.

    ``tol`` is a float or an array broadcasting against ``x`` (e.g. ``(P, 1, 1)``, one
    tolerance per matrix). Returns the transpose (contiguous), which a caller that
    symmetrises adds to ``x`` without reading it strided again. A failure is a ``ValueError``
    naming ``name``, the ``rule`` (``"rho_ij = rho_ji"``), the first offending entry, its
    mirror and ``tol``.

    Examples
    --------
    >>> check_symmetric("a", np.array([[0.0, 1.0], [1.0, 0.0]]), 0.0, "a_ij = a_ji").tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    >>> check_symmetric("a", np.array([[0.0, 1.0], [2.0, 0.0]]), 1e-12, "a_ij = a_ji")
    Traceback (most recent call last):
    ...
    ValueError: a must be symmetric (a_ij = a_ji); a[0, 1] = 1.0 but a[1, 0] = 2.0 (tolerance 1e-12)
    """
    transposed = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    gap = x - transposed
    np.abs(gap, out=gap)
    bad = gap > tol
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        swapped = (*where[:-2], where[-1], where[-2])
        limit = np.broadcast_to(tol, x.shape)[where]
        raise ValueError(f"{name} must be symmetric ({rule}); {name}{name_index(where)} = "
                         f"{x[where].item()!r} but {name}{name_index(swapped)} = "
                         f"{x[swapped].item()!r} (tolerance {float(limit):g})")
    return transposed


def check_real(
    name: str, value: object, *, low: float, high: float, low_open: bool = True,
    high_open: bool = False, rule: str = "",
) -> float:
    """Return ``value`` as a float in the interval ``(low, high]`` (openness configurable).

    Booleans and non-numbers raise ``TypeError``; NaN, infinities and values outside the
    interval raise ``ValueError``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r} ({type(value).__name__})")
    v = float(value)
    below = v <= low if low_open else v < low
    above = v >= high if high_open else v > high
    if not math.isfinite(v) or below or above:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        extra = f" ({rule})" if rule else ""
        raise ValueError(f"{name} must be a finite number in {interval}{extra}; got {value!r}")
    return v


def check_pi_min(pi_min: object) -> float:
    """The probability floor: a real number in ``(0, 1]``."""
    return check_real("pi_min", pi_min, low=0.0, high=1.0,
                      rule="the positivity floor of every continuation probability")


def check_budget_ratio(budget_ratio: float, pi_min: float) -> None:
    """The one rule tying a suffix budget ratio to the probability floor: every unfinished
    candidate is kept with probability at least ``pi_min``, so the floor alone costs ``pi_min``
    of their suffix tokens and ``budget_ratio >= pi_min``.

    Examples
    --------
    >>> check_budget_ratio(0.5, 0.08)
    >>> check_budget_ratio(0.05, 0.08)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: budget_ratio must be at least pi_min (...); got budget_ratio = 0.05 < pi_min = 0.08
    """
    if budget_ratio < pi_min:
        raise ValueError(f"budget_ratio must be at least pi_min (every unfinished candidate is "
                         f"kept with probability >= pi_min, so the floor alone costs pi_min of "
                         f"their suffix tokens); got budget_ratio = {budget_ratio!r} < pi_min = "
                         f"{pi_min!r}")


def as_bool_array(name: str, x: ArrayLike, meaning: str) -> np.ndarray:
    """``x`` as a bool array: bools as they are, ints or floats only if every entry is 0 or 1;
    anything else a ``TypeError`` naming ``name``, what it marks (``meaning``) and the dtype."""
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iuf" or not np.all(np.isin(arr, (0, 1))):
            raise TypeError(f"{name} must be a bool array ({meaning}); got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def check_finite(name: str, x: ArrayLike) -> np.ndarray:
    """Return ``x`` as a float64 array, or raise ``ValueError`` naming the first NaN/inf entry.

    Non-real input (complex, strings, objects, bools) raises ``TypeError`` (:func:`as_real_array`).
    """
    arr = as_real_array(name, x)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} must be finite (no NaN or inf); {name}{_first_bad(arr, bad)}")
    return arr


def check_probabilities(
    name: str, x: ArrayLike, *, ndim: int | None = None, role: str | None = None
) -> np.ndarray:
    """Return ``x`` as float64 after checking every entry is a probability in [0, 1].

    Parameters
    ----------
    name : str
        The argument's name, as the caller spells it (the message starts with it).
    x : array_like
        The values.
    ndim : int, optional
        The number of axes ``x`` must have.
    role : str, optional
        What the values are, for the message: ``"{name} are {role} and must lie in [0, 1]"``.
        Default: ``"success predictions"`` for a name ending in ``p_hat`` (the prefix heads'
        predictions, not a design's probabilities), else ``"inclusion probabilities"``.

    Raises
    ------
    ValueError
        A NaN or infinite entry, a value outside [0, 1] (the first one is named), a scalar, or
        the wrong number of axes.
    TypeError
        Non-real input (:func:`as_real_array`).
    """
    arr = check_finite(name, x)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array; got shape {arr.shape}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array with at least one axis; got a scalar")
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        if role is None:
            role = ("success predictions" if name.split(".")[-1] == "p_hat"
                    else "inclusion probabilities")
        raise ValueError(
            f"{name} must lie in [0, 1] ({name} are {role}); {name}{_first_bad(arr, bad)}"
        )
    return arr


def check_integer_sum(name: str, x: np.ndarray, *, tol: float = 1e-9, hint: str = "") -> int:
    """Return ``round(sum(x))`` if it is within ``tol`` of an integer, else raise ``ValueError``."""
    total = float(np.sum(x))
    n = round(total)
    if abs(total - n) > tol:
        raise ValueError(
            f"{name} must sum to an integer (fixed sample size) within {tol:g}; "
            f"got sum({name}) = {total!r}.{(' ' + hint) if hint else ''}"
        )
    return n


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], *, what: str = "") -> None:
    """Raise ``ValueError`` unless ``x.shape == shape``."""
    if x.shape != shape:
        extra = f" ({what})" if what else ""
        raise ValueError(f"{name} must have shape {shape}{extra}; got {x.shape}")


def check_int(
    name: str, value: object, *, low: int | None = None, high: int | None = None, rule: str = ""
) -> int:
    """Return ``value`` as an ``int`` in ``[low, high]``; ``TypeError`` for non-integers.

    Booleans are refused (``True`` is an ``int`` to Python but never a meant count), and so are
    integral floats such as ``3.0`` (a float here is usually a computed value gone wrong).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int; got {value!r} ({type(value).__name__})")
    out = int(value)
    if (low is not None and out < low) or (high is not None and out > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        extra = f" ({rule})" if rule else ""
        raise ValueError(f"{name} must lie in [{lo}, {hi}]{extra}; got {out}")
    return out


def check_option_names(func: str, options: Mapping[str, object], group: Any) -> None:
    """Refuse a keyword outside the ``TypedDict`` option group ``group`` that ``func`` takes.

    A function typed ``**options: Unpack[Group]`` would otherwise accept a misspelt option
    silently at run time (the ``TypedDict`` is only checked statically); this raises the
    ``TypeError`` Python raises for an unknown named parameter, listing the known ones.
    """
    known = group.__required_keys__ | group.__optional_keys__
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{func}() got an unexpected keyword argument {unknown[0]!r}; its "
                        f"options ({group.__name__}) are {sorted(known)}")


def _bytes_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps a number >= 1 (``"74.5 GiB"``)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_table_size(
    what: str, n_values: int, fix: str, *, limit: int | None = None,
    limit_name: str = "MAX_TABLE_BYTES",
) -> None:
    """Refuse, before it is allocated, a float64 table of ``n_values`` entries above ``limit``.

    The one memory guard of the package: the allocation's ``(..., G, G)`` pair tables, the
    designs' tables and the exact covariance's inclusion table all go through it, and so does
    the ``pairht`` command's check of ``--group-size``.

    Parameters
    ----------
    what : str
        The table and the size that sets it, e.g. ``"allocate: the (1, 100000, 100000) pair
        tables of p_hat"``; the message starts with it.
    n_values : int
        Entries of the table (Python int: no overflow at any size).
    fix : str
        What the caller can do instead; the message ends with it.
    limit : int, optional
        Largest table in bytes (default :data:`MAX_TABLE_BYTES`, read at call time).
    limit_name : str
        How the message names the limit (its size in bytes follows in parentheses).

    Raises
    ------
    ValueError
        ``8 * n_values > limit``: ``"<what> needs <n> float64 values (<size>), more than
        <limit_name> (<limit size>); <fix>"``.

    Examples
    --------
    >>> check_table_size("a (100000, 100000) table", 100000**2, "use fewer units")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: a (100000, 100000) table needs 10000000000 float64 values (74.5 GiB), more ...
    """
    if limit is None:
        limit = MAX_TABLE_BYTES
    nbytes = 8 * int(n_values)
    if nbytes > limit:
        raise ValueError(
            f"{what} needs {int(n_values)} float64 values ({_bytes_text(nbytes)}), more than "
            f"{limit_name} ({_bytes_text(limit)}); {fix}"
        )


def check_pairs_positive(allocator: str, joint: np.ndarray, finished: np.ndarray,
                         k: ArrayLike | None = None, *, anchor: bool = True) -> None:
    r"""Refuse a plan with a zero joint inclusion probability: ``ValueError`` unless every
    group has ``rho_ij > 0`` for every pair ``i != j`` of its ``G`` candidates.

    The pair Horvitz-Thompson estimator of a group is exactly unbiased iff every pair of its
    candidates can be observed together; a pair with ``rho_ij = 0`` never is, and the group's
    estimate is biased. One check for every planner (``pairht.step.plan_continuations`` and
    ``pairht.comparators.comparator_plan``).

    Parameters
    ----------
    allocator : str
        The rule's name, for the message.
    joint : (B, G, G) ndarray
        The exact ``rho_ij`` of the design drawn from.
    finished : (B, G) bool ndarray
        Finished candidates (``U_b`` in the message counts the others).
    k : (B,) array_like, optional
        The continuations per prompt of a prompt-level rule (``info["k"]``): the message names
        ``k_b`` and the fix ``min_rollouts >= 1``.
    anchor : bool
        Whether the planner offers ``anchor_pair=True`` (named as a fix).

    Examples
    --------
    >>> import numpy as np
    >>> fin = np.array([[True, False, False]])
    >>> check_pairs_positive("hora", np.full((1, 3, 3), 0.5), fin)   # every pair positive
    >>> none = np.diag([1.0, 0.0, 0.0])[None]   # k_b = 0: pi = 0 on both unfinished
    >>> check_pairs_positive("hora", none, fin, k=[0])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: allocator 'hora' continues k_b = 0 of the U_b = 2 unfinished candidates of ...
    """
    rho = np.asarray(joint, dtype=np.float64)
    G = rho.shape[-1]
    zero = ~(rho > 0) & ~np.eye(G, dtype=bool)
    if not zero.any():
        return
    b, i, j = (int(x) for x in np.argwhere(zero)[0])
    U = int((~np.asarray(finished, dtype=bool)[b]).sum())
    rho_ij = rho[b, i, j].item() + 0.0  # -0.0 (0 * -1 in a closed form) reads 0.0
    pair = (f"candidates {i} and {j} have joint inclusion probability rho_ij = {rho_ij!r}, so "
            f"the pair-HT estimate of that group is biased (exact unbiasedness needs every "
            f"rho_ij > 0)")
    if k is not None:
        k_b = int(np.asarray(k).reshape(-1)[b])
        fix = ("or anchor_pair=True" if anchor else
               "or plan with pairht.step.plan_continuations(..., anchor_pair=True)")
        raise ValueError(
            f"allocator {allocator!r} continues k_b = {k_b} of the U_b = {U} unfinished "
            f"candidates of prompt b = {b}: {pair}; pass min_rollouts >= 1 (the default: every "
            f"prompt continues at least min(min_rollouts, U_b) candidates) {fix}")
    fix = ", or pass anchor_pair=True" if anchor else ""
    raise ValueError(
        f"allocator {allocator!r} leaves prompt b = {b} (U_b = {U} unfinished candidates) with "
        f"a zero joint: {pair}; give every unfinished candidate pi > 0 with a design whose "
        f"joints are all positive{fix}")
