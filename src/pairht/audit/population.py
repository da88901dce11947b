r"""Frozen candidate populations: the on-disk format, its validation, and a synthetic generator.

A *population* is what the frozen-policy audit replays designs against (PAIR paper, section
"Frozen-policy estimator audit"): for each of ``P`` prompts, ``G`` fully generated candidates
with

=============  ============  ==========================================================
field          shape         meaning
=============  ============  ==========================================================
``p_hat``      (P, G)        prefix success prediction, in [0, 1]
``c_hat``      (P, G)        prefix prediction of the remaining (suffix) tokens, > 0
``rewards``    (P, G)        realised terminal reward r_i (finite; binary or partial)
``costs``      (P, G)        realised suffix tokens C_i, > 0
``prefix_len`` (P, G)        prefix tokens already generated (integer, >= 0)
``m_hat``      (P, G)        optional: prefix prediction of the score norm ||s_i||, >= 0
``finished``   (P, G)        optional bool: the prefix already ended (complete, free, pi = 1)
``scores``     (P, G, d)     sequence scores s_i on a fixed parameter block, *or*
``gram``       (P, G, G)     their Gram matrices  K_ij = <s_i, s_j>  (scores can be huge)
=============  ============  ==========================================================

Every audit metric is a quadratic form in the scores, so the Gram matrix is all the audit
needs; :meth:`Population.reduced_scores` turns it into ``(P, G, G)`` pseudo-scores ``L`` with
``L L^T = K`` on which every computation runs.

On disk a population is one ``.npz`` file (``numpy.savez_compressed``, no pickles) holding the
arrays above plus ``format = "pairht.population"``, ``format_version = 1`` and ``meta`` (a JSON
string). See ``docs/audit.md`` for the full specification.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from pairht._validation import (
    RNGLike,
    as_generator,
    check_finite,
    check_probabilities,
    check_symmetric,
)

#: Value of the ``format`` key identifying a population file.
FORMAT_NAME = "pairht.population"
#: Version of the on-disk format this module writes and reads.
FORMAT_VERSION = 1

_PER_CANDIDATE = ("p_hat", "c_hat", "rewards", "costs", "prefix_len")
#: Relative tolerance of the Gram checks (symmetry, positive semi-definiteness).
_GRAM_RTOL = 1e-8


@dataclass(frozen=True, eq=False)
class Population:
    """A frozen candidate population: ``P`` prompts, ``G`` candidates each.

    Parameters
    ----------
    p_hat, c_hat, rewards, costs : (P, G) array_like
        Prefix success prediction in [0, 1], predicted suffix tokens (> 0), realised reward
        (finite), realised suffix tokens (> 0).
    prefix_len : (P, G) array_like of int
        Prefix tokens already generated for each candidate (>= 0).
    scores : (P, G, d) array_like, optional
        Sequence scores on a fixed parameter block.
    gram : (P, G, G) array_like, optional
        Gram matrices ``K = S S^T`` (symmetric positive semi-definite). Exactly one of
        ``scores`` and ``gram`` must be given.
    m_hat : (P, G) array_like, optional
        Prefix prediction of the score norm ``||s_i||`` (finite, >= 0), the input of the
        ``score_norm`` edge proxy ``a_ij = d_ij (m_i + m_j)^2 / 4``.
    meta : dict, optional
        JSON-serialisable provenance (generator arguments, checkpoint, ...).

    Raises
    ------
    ValueError
        Naming the field, the offending value and the rule, for any malformed input.

    Examples
    --------
    >>> import numpy as np
    >>> pop = Population(p_hat=[[0.2, 0.7]], c_hat=[[10.0, 20.0]], rewards=[[0.0, 1.0]],
    ...                  costs=[[12.0, 18.0]], prefix_len=[[4, 4]], scores=np.eye(2)[None])
    >>> pop.n_prompts, pop.group_size
    (1, 2)
    >>> pop.gram_matrix()[0]
    array([[1., 0.],
           [0., 1.]])
    """

    p_hat: np.ndarray
    c_hat: np.ndarray
    rewards: np.ndarray
    costs: np.ndarray
    prefix_len: np.ndarray
    scores: np.ndarray | None = None
    gram: np.ndarray | None = None
    m_hat: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    finished: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrays = validate_population_arrays(
            p_hat=self.p_hat,
            c_hat=self.c_hat,
            rewards=self.rewards,
            costs=self.costs,
            prefix_len=self.prefix_len,
            scores=self.scores,
            gram=self.gram,
            m_hat=self.m_hat,
            finished=self.finished,
        )
        for key, value in arrays.items():
            object.__setattr__(self, key, value)
        try:
            json.dumps(self.meta)
        except TypeError as exc:
            raise ValueError(f"meta must be JSON-serialisable; {exc}") from None

    # ------------------------------------------------------------------ shape
    @property
    def n_prompts(self) -> int:
        """Number of prompts ``P``."""
        return int(self.rewards.shape[0])

    @property
    def group_size(self) -> int:
        """Candidates per prompt ``G``."""
        return int(self.rewards.shape[1])

    # ------------------------------------------------------------------ scores
    def gram_matrix(self) -> np.ndarray:
        """Gram matrices ``K_ij = <s_i, s_j>``, shape ``(P, G, G)``."""
        if self.gram is not None:
            return self.gram
        assert self.scores is not None  # the constructor requires one of them
        return np.einsum("pid,pjd->pij", self.scores, self.scores)

    def reduced_scores(self) -> np.ndarray:
        r"""Pseudo-scores ``L`` of shape ``(P, G, G)`` with ``L L^T = K`` for every prompt.

        ``L = V diag(sqrt(max(lambda, 0)))`` from the eigendecomposition ``K = V diag(lambda)
        V^T``. Every audit metric (norms of gradient errors, cosines) is a function of inner
        products of scores only, hence identical on ``L`` and on the original scores, and
        ``d' = G`` keeps the audit's cost independent of the parameter-block size ``d``.
        """
        lam, vec = np.linalg.eigh(self.gram_matrix())
        return vec * np.sqrt(np.clip(lam, 0.0, None))[:, None, :]

    def subset(self, prompts: ArrayLike) -> Population:
        """The population restricted to the given prompt indices (same ``G``)."""
        idx = np.asarray(prompts, dtype=np.int64).reshape(-1)
        return Population(
            p_hat=self.p_hat[idx],
            c_hat=self.c_hat[idx],
            rewards=self.rewards[idx],
            costs=self.costs[idx],
            prefix_len=self.prefix_len[idx],
            scores=None if self.scores is None else self.scores[idx],
            gram=None if self.gram is None else self.gram[idx],
            m_hat=None if self.m_hat is None else self.m_hat[idx],
            meta=dict(self.meta),
            finished=None if self.finished is None else self.finished[idx],
        )

    def __repr__(self) -> str:
        kind = f"scores d={self.scores.shape[2]}" if self.scores is not None else "gram"
        return f"Population(P={self.n_prompts}, G={self.group_size}, {kind})"


def validate_population_arrays(
    *,
    p_hat: ArrayLike,
    c_hat: ArrayLike,
    rewards: ArrayLike,
    costs: ArrayLike,
    prefix_len: ArrayLike,
    scores: ArrayLike | None,
    gram: ArrayLike | None,
    m_hat: ArrayLike | None = None,
    finished: ArrayLike | None = None,
) -> dict[str, np.ndarray | None]:
    """Check every population rule and return the arrays as read-only float64 / int64.

    Rules: all per-candidate arrays share one shape ``(P, G)`` with ``P >= 1`` and
    ``G >= 2``; everything is finite; ``p_hat`` in [0, 1]; ``c_hat`` and ``costs`` > 0;
    ``prefix_len`` integer-valued and >= 0; optional ``m_hat`` >= 0; exactly one of
    ``scores (P, G, d)`` and
    ``gram (P, G, G)``; ``gram`` symmetric and positive semi-definite (relative tolerance
    1e-8 of its largest diagonal entry).
    """
    out: dict[str, np.ndarray | None] = {}
    ref = check_finite("rewards", rewards)
    if ref.ndim != 2:
        raise ValueError(
            f"rewards must have shape (P, G) (prompts x candidates); got shape {ref.shape}"
        )
    if ref.shape[0] < 1 or ref.shape[1] < 2:
        raise ValueError(
            f"a population needs P >= 1 prompts and G >= 2 candidates per prompt; "
            f"got rewards of shape {ref.shape}"
        )
    shape = ref.shape
    out["rewards"] = ref
    named = {"p_hat": check_probabilities("p_hat", p_hat), "c_hat": check_finite("c_hat", c_hat),
             "costs": check_finite("costs", costs)}
    plen = check_finite("prefix_len", prefix_len)
    for name, arr in named.items():
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape} like rewards; got {arr.shape}")
        out[name] = arr
    if plen.shape != shape:
        raise ValueError(f"prefix_len must have shape {shape} like rewards; got {plen.shape}")
    for name in ("c_hat", "costs"):
        arr = named[name]
        bad = arr <= 0.0
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name} must be positive (suffix token counts); "
                f"{name}[{where[0]}, {where[1]}] = {arr[where]!r}"
            )
    bad = (plen < 0) | (plen != np.round(plen))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"prefix_len must hold non-negative integers; "
            f"prefix_len[{where[0]}, {where[1]}] = {plen[where]!r}"
        )
    out["prefix_len"] = plen.astype(np.int64)
    out["m_hat"] = None
    if m_hat is not None:
        m = check_finite("m_hat", m_hat)
        if m.shape != shape:
            raise ValueError(f"m_hat must have shape {shape} like rewards; got {m.shape}")
        if np.any(m < 0):
            where = tuple(int(i) for i in np.argwhere(m < 0)[0])
            raise ValueError(f"m_hat must be >= 0 (a predicted score norm); "
                             f"m_hat[{where[0]}, {where[1]}] = {m[where]!r}")
        out["m_hat"] = m
    out["finished"] = None
    if finished is not None:
        f = np.asarray(finished)
        if f.shape != shape or f.dtype.kind not in "biuf" or not np.isin(f, (0, 1)).all():
            raise ValueError(f"finished must be a bool array of shape {shape} like rewards "
                             f"(True: the prefix already ended); got dtype {f.dtype}, shape "
                             f"{f.shape}")
        out["finished"] = f.astype(bool)
    if (scores is None) == (gram is None):
        raise ValueError(
            "exactly one of scores (P, G, d) and gram (P, G, G) must be given; got "
            + ("neither" if scores is None else "both")
        )
    out["scores"] = out["gram"] = None
    if scores is not None:
        s = check_finite("scores", scores)
        if s.ndim != 3 or s.shape[:2] != shape or s.shape[2] < 1:
            raise ValueError(
                f"scores must have shape (P, G, d) = ({shape[0]}, {shape[1]}, d) with d >= 1; "
                f"got {s.shape}"
            )
        out["scores"] = s
    else:
        assert gram is not None
        k = check_finite("gram", gram)
        if k.shape != (shape[0], shape[1], shape[1]):
            raise ValueError(
                f"gram must have shape (P, G, G) = ({shape[0]}, {shape[1]}, {shape[1]}); "
                f"got {k.shape}"
            )
        scale = np.maximum(np.abs(np.diagonal(k, axis1=1, axis2=2)).max(axis=1), 1e-300)
        # relative to each prompt's largest squared norm
        transposed = check_symmetric("gram", k, _GRAM_RTOL * scale[:, None, None],
                                     "it is S S^T")
        lam_min = np.linalg.eigvalsh(0.5 * (k + transposed))[:, 0] / scale
        if np.any(lam_min < -_GRAM_RTOL * k.shape[1]):
            q = int(np.argmin(lam_min))
            raise ValueError(
                f"gram must be positive semi-definite (it is S S^T); prompt {q} has smallest "
                f"eigenvalue {lam_min[q] * scale[q]:.3g} (relative {lam_min[q]:.3g})"
            )
        out["gram"] = k
    for value in out.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return out


def save_population(path: str | os.PathLike[str], population: Population) -> None:
    """Write ``population`` to ``path`` in the versioned ``.npz`` format (no pickles).

    Examples
    --------
    >>> import os, tempfile
    >>> pop = synthetic_population(2, 4, rng=0)
    >>> path = os.path.join(tempfile.mkdtemp(), "pop.npz")
    >>> save_population(path, pop)
    >>> load_population(path).group_size
    4
    """
    if not isinstance(population, Population):
        raise ValueError(f"population must be a Population; got {type(population).__name__}")
    arrays: dict[str, Any] = {
        "format": np.array(FORMAT_NAME),
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "meta": np.array(json.dumps(population.meta)),
    }
    for key in _PER_CANDIDATE:
        arrays[key] = getattr(population, key)
    if population.m_hat is not None:
        arrays["m_hat"] = population.m_hat
    if population.finished is not None:
        arrays["finished"] = population.finished
    if population.scores is not None:
        arrays["scores"] = population.scores
    else:
        arrays["gram"] = population.gram
    with open(os.fspath(path), "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def load_population(path: str | os.PathLike[str]) -> Population:
    """Read and validate a population file written by :func:`save_population`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a ``.npz`` archive (decided from its first bytes; it is never read
        as a pickle), is a damaged one, is not a population (``format`` key), has an
        unsupported ``format_version``, misses a key, or breaks any rule of
        :func:`validate_population_arrays` (the message names the key and the rule).
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"population file not found: {p}")
    if os.path.isdir(p):
        raise ValueError(f"population path is a directory, not an .npz file: {p}")
    npz = _open_npz(p)
    with npz:
        keys = set(npz.files)
        if "format_version" not in keys:
            raise ValueError(f"{p}: missing key 'format_version' (not a pairht population file)")
        raw_version = _read_key(npz, "format_version", p)
        try:
            version = int(raw_version)
        except (TypeError, ValueError):
            raise ValueError(
                f"{p}: format_version must be an integer scalar; got {raw_version!r}"
            ) from None
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{p}: unsupported format_version {version}; this pairht reads version "
                f"{FORMAT_VERSION}"
            )
        if "format" in keys and str(_read_key(npz, "format", p)) != FORMAT_NAME:
            raise ValueError(
                f"{p}: format must be {FORMAT_NAME!r}; got {str(npz['format'])!r}"
            )
        for key in _PER_CANDIDATE:
            if key not in keys:
                raise ValueError(f"{p}: missing key {key!r} (required, shape (P, G))")
        if "scores" not in keys and "gram" not in keys:
            raise ValueError(f"{p}: missing key 'scores' (P, G, d) or 'gram' (P, G, G)")
        if "scores" in keys and "gram" in keys:
            raise ValueError(f"{p}: holds both 'scores' and 'gram'; keep exactly one")
        meta: dict[str, Any] = {}
        if "meta" in keys:
            try:
                meta = json.loads(str(_read_key(npz, "meta", p)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}: meta is not valid JSON ({exc})") from None
            if not isinstance(meta, dict):
                raise ValueError(f"{p}: meta must be a JSON object; got {type(meta).__name__}")
        data = {key: _read_key(npz, key, p)
                for key in (*_PER_CANDIDATE, "scores", "gram", "m_hat", "finished") if key in keys}
    for key, value in data.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(f"{p}: {key} must be numeric; got dtype {value.dtype}")
    try:
        return Population(**data, meta=meta)
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None


#: First bytes of a zip archive (every .npz is one; the second form is an empty archive) and
#: of a single .npy array: what ``numpy.load`` itself tests before it opens a file.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_MAGIC = b"\x93NUMPY"


def _open_npz(path: str) -> Any:
    """``numpy.load(path, allow_pickle=False)`` of a file known to be a zip archive.

    The type is decided from the first bytes, as numpy does, *before* loading: numpy reads a
    file that is neither zip nor .npy as a pickle, and refuses it with a message about
    ``allow_pickle``, which is wrong for random bytes and steers a user toward unpickling an
    untrusted file. A population is never a pickle, so that message is never shown.
    """
    with open(path, "rb") as fh:
        head = fh.read(len(_NPY_MAGIC))
    if head.startswith(_NPY_MAGIC):
        raise ValueError(f"population: {path} is a single .npy array, not a .npz archive "
                         f"(save_population writes the .npz format)")
    if not head.startswith(_ZIP_MAGIC):
        raise ValueError(f"population: {path} is not a .npz archive (numpy cannot read it as a "
                         f"zip file, which every .npz is)")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:  # zipfile and zlib raise several types for a damaged archive
        raise ValueError(f"population: {path} is a corrupt .npz archive "
                         f"({type(exc).__name__}: {exc})") from None


def _read_key(npz: Any, key: str, path: str) -> np.ndarray:
    """``npz[key]``, with numpy's refusal of pickled object arrays turned into a message that
    names the file and the key (numpy's own names neither), and a damaged member into one
    that says so."""
    try:
        return np.asarray(npz[key])
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"population: {path} is a corrupt .npz archive: cannot read key "
                         f"{key!r} ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise ValueError(f"{path}: cannot read key {key!r} ({exc})") from None
        raise ValueError(
            f"{path}: {key} is an object array (pickled Python objects); a population file "
            f"holds plain numeric arrays only, and pickles are never loaded (they can run "
            f"code). Save {key} with a numeric dtype, e.g. np.asarray({key}, dtype=float)"
        ) from None


# ---------------------------------------------------------------------- synthetic generator
_REWARDS = ("binary", "partial")
_CALIBRATIONS = ("oracle", "noisy", "miscalibrated")
_COST_DISTS = ("lognormal", "constant")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def synthetic_population(
    n_prompts: int,
    G: int,
    *,
    reward: str = "binary",
    calibration: str = "oracle",
    noise: float = 0.5,
    cost_dist: str = "lognormal",
    cost_sigma: float = 0.6,
    cost_tail: float = 0.5,
    score_dim: int = 32,
    score_reward_corr: float = 0.5,
    prefix_tokens: int = 256,
    as_gram: bool = False,
    rng: RNGLike = None,
) -> Population:
    r"""A synthetic frozen population with informative prefixes and long-tailed suffix costs.

    Generative model, for prompt ``q`` and candidate ``i`` (all draws independent):

    * prompt difficulty ``m_q ~ N(0, 1.5^2)``; prefix signal ``z_qi ~ N(0, 1.5^2)``;
      true success probability given the prefix ``p_qi = sigmoid(m_q + z_qi)``.
    * reward: ``"binary"``: ``r ~ Bernoulli(p)``; ``"partial"``: ``r ~ Beta(4 p + 0.1,
      4 (1 - p) + 0.1)`` (partial credit in (0, 1) with mean close to ``p``).
    * expected suffix tokens given the prefix ``c_qi = 400 exp(u_q + cost_sigma v_qi)``,
      ``u_q ~ N(0, 0.5^2)``, ``v ~ N(0, 1)``; realised tokens ``C = c exp(cost_tail e -
      cost_tail^2 / 2)``, ``e ~ N(0, 1)`` (log-normal, long right tail, ``E[C | c] = c``).
      ``cost_dist="constant"`` sets every ``c = C = 400``.
    * predictions: ``"oracle"``: ``p_hat = p``, ``c_hat = c`` (a perfectly calibrated prefix
      head); ``"noisy"``: ``p_hat = sigmoid(logit p + noise n1)``, ``c_hat = c exp(noise n2)``;
      ``"miscalibrated"``: overconfident and biased, ``p_hat = sigmoid(2 logit p + 0.5 + noise
      n1)``, ``c_hat = 0.6 c exp(noise n2)``.
    * scores on a ``score_dim`` parameter block: ``s_qi = sqrt(C_qi / 400) (e_qi / sqrt(d) +
      score_reward_corr (r_qi - rbar_q) w_q)`` with ``e ~ N(0, I_d)`` and a unit direction
      ``w_q``: longer sequences have larger score norms, and ``score_reward_corr`` sets how
      much of the score aligns with the reward contrast.
    * ``m_hat = sqrt(c_hat / 400)``: a length-based score-norm prediction (the scores' norm
      grows as ``sqrt(C)``), input of the ``score_norm`` edge proxy.
    * ``prefix_len = prefix_tokens + U{0..31}`` (snapping to a newline within 32 tokens).

    Parameters
    ----------
    n_prompts, G : int
        Population size ``P >= 1`` and candidates per prompt ``G >= 2``.
    reward, calibration, cost_dist : str
        See above.
    noise : float
        Prediction noise (>= 0) of the noisy and miscalibrated predictors.
    cost_sigma, cost_tail : float
        Spread of predicted costs across candidates and of realised around predicted (>= 0).
    score_dim : int
        Parameter-block size ``d >= 1``.
    score_reward_corr : float
        Weight of the reward-aligned score component.
    prefix_tokens : int
        Prefix checkpoint ``tau``.
    as_gram : bool
        Store ``gram (P, G, G)`` instead of ``scores``.
    rng : int, Generator or None

    Returns
    -------
    Population

    Examples
    --------
    >>> pop = synthetic_population(3, 8, reward="partial", calibration="noisy", rng=1)
    >>> pop.p_hat.shape, pop.scores.shape
    ((3, 8), (3, 8, 32))
    """
    for name, value, lo in (("n_prompts", n_prompts, 1), ("G", G, 2), ("score_dim", score_dim, 1),
                            ("prefix_tokens", prefix_tokens, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise ValueError(f"{name} must be an int >= {lo}; got {value!r}")
    for name, choice, allowed in (("reward", reward, _REWARDS),
                                  ("calibration", calibration, _CALIBRATIONS),
                                  ("cost_dist", cost_dist, _COST_DISTS)):
        if choice not in allowed:
            raise ValueError(f"{name} must be one of {allowed}; got {choice!r}")
    for name, x in (("noise", noise), ("cost_sigma", cost_sigma), ("cost_tail", cost_tail)):
        if not np.isfinite(x) or x < 0:
            raise ValueError(f"{name} must be a finite number >= 0; got {x!r}")
    if not np.isfinite(score_reward_corr):
        raise ValueError(f"score_reward_corr must be finite; got {score_reward_corr!r}")
    gen = as_generator(rng)
    P, d = int(n_prompts), int(score_dim)
    logit = gen.normal(0.0, 1.5, (P, 1)) + gen.normal(0.0, 1.5, (P, G))
    p = _sigmoid(logit)
    if reward == "binary":
        r = (gen.random((P, G)) < p).astype(np.float64)
    else:
        r = gen.beta(4.0 * p + 0.1, 4.0 * (1.0 - p) + 0.1)
    if cost_dist == "lognormal":
        c = 400.0 * np.exp(gen.normal(0.0, 0.5, (P, 1)) + cost_sigma * gen.normal(size=(P, G)))
        C = c * np.exp(cost_tail * gen.normal(size=(P, G)) - 0.5 * cost_tail**2)
    else:
        c = np.full((P, G), 400.0)
        C = c.copy()
    n1, n2 = gen.normal(size=(P, G)), gen.normal(size=(P, G))
    if calibration == "oracle":
        p_hat, c_hat = p, c
    elif calibration == "noisy":
        p_hat, c_hat = _sigmoid(logit + noise * n1), c * np.exp(noise * n2)
    else:
        p_hat, c_hat = _sigmoid(2.0 * logit + 0.5 + noise * n1), 0.6 * c * np.exp(noise * n2)
    w = gen.normal(size=(P, 1, d))
    w /= np.linalg.norm(w, axis=2, keepdims=True)
    e = gen.normal(size=(P, G, d)) / np.sqrt(d)
    contrast = (r - r.mean(axis=1, keepdims=True))[:, :, None]
    s = np.sqrt(C / 400.0)[:, :, None] * (e + score_reward_corr * contrast * w)
    plen = prefix_tokens + gen.integers(0, 32, (P, G))
    meta: dict[str, Any] = {
        "source": "pairht.audit.synthetic_population",
        "n_prompts": P, "G": int(G), "reward": reward, "calibration": calibration,
        "noise": float(noise), "cost_dist": cost_dist, "cost_sigma": float(cost_sigma),
        "cost_tail": float(cost_tail), "score_dim": d,
        "score_reward_corr": float(score_reward_corr), "prefix_tokens": int(prefix_tokens),
    }
    gram = np.einsum("pid,pjd->pij", s, s) if as_gram else None
    return Population(p_hat=p_hat, c_hat=c_hat, rewards=r, costs=C, prefix_len=plen,
                      scores=None if as_gram else s, gram=gram, m_hat=np.sqrt(c_hat / 400.0),
                      meta=meta)
