"""The population format: round trips, and every malformed file names what is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pairht.audit import (
    FORMAT_VERSION,
    Population,
    load_population,
    save_population,
    synthetic_population,
)


def _arrays(pop: Population) -> dict:
    out = {k: getattr(pop, k) for k in ("p_hat", "c_hat", "rewards", "costs", "prefix_len")}
    out["scores"] = pop.scores
    return out


def _write(path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


@pytest.fixture
def pop() -> Population:
    return synthetic_population(3, 5, reward="partial", calibration="noisy", rng=3)


@pytest.mark.parametrize("as_gram", [False, True])
def test_save_load_round_trip_is_exact(tmp_path, as_gram):
    pop = synthetic_population(4, 6, as_gram=as_gram, rng=1)
    path = tmp_path / "pop.npz"
    save_population(path, pop)
    back = load_population(path)
    for key in ("p_hat", "c_hat", "rewards", "costs", "prefix_len"):
        np.testing.assert_array_equal(getattr(back, key), getattr(pop, key))
    np.testing.assert_array_equal(back.gram_matrix(), pop.gram_matrix())
    assert back.meta == pop.meta
    with np.load(path) as npz:
        assert int(npz["format_version"]) == FORMAT_VERSION
        assert str(npz["format"]) == "pairht.population"


def test_gram_population_gives_the_same_gram_as_its_scores():
    a = synthetic_population(3, 5, rng=2)
    b = synthetic_population(3, 5, rng=2, as_gram=True)
    np.testing.assert_allclose(a.gram_matrix(), b.gram_matrix(), rtol=1e-14, atol=1e-15)


def test_reduced_scores_reproduce_the_gram_matrix(pop):
    L = pop.reduced_scores()
    K = pop.gram_matrix()
    assert L.shape == (3, 5, 5)
    np.testing.assert_allclose(L @ np.swapaxes(L, 1, 2), K, atol=1e-12 * np.abs(K).max())


def test_calibration_changes_only_the_predictions():
    a = synthetic_population(4, 6, calibration="oracle", rng=5)
    b = synthetic_population(4, 6, calibration="miscalibrated", rng=5)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.costs, b.costs)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert not np.allclose(a.p_hat, b.p_hat)


def test_synthetic_population_has_long_tailed_positive_costs():
    pop = synthetic_population(200, 16, rng=0)
    assert np.all(pop.costs > 0) and np.all(pop.c_hat > 0)
    c = pop.costs.ravel()
    assert np.mean(c) > np.median(c)  # right-skewed (log-normal)
    assert set(np.unique(pop.rewards)) <= {0.0, 1.0}


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("p_hat", lambda a: np.where(np.eye(5)[None, 0:3, :] > 0, 1.5, a),
         r"p_hat must lie in \[0, 1\]"),
        ("c_hat", lambda a: -a, "c_hat must be positive"),
        ("costs", lambda a: a * 0.0, "costs must be positive"),
        ("rewards", lambda a: np.where(a >= 0, np.nan, a), "rewards must be finite"),
        ("prefix_len", lambda a: a - 1000, "prefix_len must hold non-negative integers"),
        ("scores", lambda a: a[:, :4], "scores must have shape"),
        ("c_hat", lambda a: a[:, :4], r"c_hat must have shape \(3, 5\)"),
    ],
)
def test_load_rejects_malformed_arrays_naming_the_key(tmp_path, pop, key, value, match):
    arrays = _arrays(pop)
    arrays[key] = value(np.asarray(arrays[key]))
    path = _write(tmp_path / "bad.npz", format_version=FORMAT_VERSION, **arrays)
    with pytest.raises(ValueError, match=match):
        load_population(path)


@pytest.mark.parametrize("missing", ["p_hat", "c_hat", "rewards", "costs", "prefix_len"])
def test_load_names_a_missing_key(tmp_path, pop, missing):
    arrays = _arrays(pop)
    del arrays[missing]
    path = _write(tmp_path / "bad.npz", format_version=FORMAT_VERSION, **arrays)
    with pytest.raises(ValueError, match=f"missing key '{missing}'"):
        load_population(path)


def test_load_rejects_a_version_mismatch(tmp_path, pop):
    path = _write(tmp_path / "v2.npz", format_version=FORMAT_VERSION + 1, **_arrays(pop))
    with pytest.raises(ValueError, match="unsupported format_version 2; this pairht reads "):
        load_population(path)


def test_load_rejects_files_without_a_version(tmp_path, pop):
    path = _write(tmp_path / "nov.npz", **_arrays(pop))
    with pytest.raises(ValueError, match="missing key 'format_version'"):
        load_population(path)


def test_load_rejects_scores_and_gram_together(tmp_path, pop):
    path = _write(tmp_path / "both.npz", format_version=1, gram=pop.gram_matrix(), **_arrays(pop))
    with pytest.raises(ValueError, match="both 'scores' and 'gram'"):
        load_population(path)


def test_load_rejects_a_gram_that_is_not_psd(tmp_path, pop):
    arrays = _arrays(pop)
    del arrays["scores"]
    gram = pop.gram_matrix().copy()
    gram[1] -= 10.0 * np.eye(5) * np.abs(gram).max()
    path = _write(tmp_path / "neg.npz", format_version=1, gram=gram, **arrays)
    with pytest.raises(ValueError, match=r"gram must be positive semi-definite.*prompt 1"):
        load_population(path)


def test_load_rejects_a_missing_path_and_non_npz_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="population file not found"):
        load_population(tmp_path / "nope.npz")
    text = tmp_path / "x.npz"
    text.write_text("not a zip")
    with pytest.raises(ValueError, match="cannot read"):
        load_population(text)
    with pytest.raises(ValueError, match="is a directory"):
        load_population(tmp_path)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        # neither zip nor .npy: numpy reads such a file as a pickle and used to answer "contains
        # pickled (object) data ... allow_pickle=", steering toward unpickling untrusted bytes
        (np.random.default_rng(0).bytes(4096),
         r"^population: .*random\.npz is not a \.npz archive \(numpy cannot read it as a zip "
         r"file, which every \.npz is\)$"),
        (b"", r"is not a \.npz archive"),
        (b"PK\x03\x04 then garbage",
         r"^population: .*random\.npz is a corrupt \.npz archive \(BadZipFile: "),
    ],
    ids=["random-bytes", "empty", "zip-header-only"],
)
def test_a_file_that_is_not_an_npz_says_what_it_is_not_and_never_mentions_pickles(
        tmp_path, content, match):
    path = tmp_path / "random.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        load_population(path)
    assert "pickle" not in str(info.value)


def test_a_single_npy_array_is_named_as_such(tmp_path):
    path = tmp_path / "one.npz"
    with open(path, "wb") as fh:
        np.save(fh, np.zeros(3))
    with pytest.raises(ValueError, match=r"one\.npz is a single \.npy array, not a \.npz "
                                         r"archive"):
        load_population(path)


def test_a_damaged_member_of_the_archive_is_named_corrupt_not_a_traceback(tmp_path, pop):
    path = tmp_path / "damaged.npz"
    save_population(path, pop)  # compressed: a flipped byte breaks zlib or the CRC
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"damaged\.npz is a corrupt \.npz archive"):
        load_population(path)


def test_meta_must_be_json(tmp_path, pop):
    path = _write(tmp_path / "m.npz", format_version=1, meta=np.array("{oops"), **_arrays(pop))
    with pytest.raises(ValueError, match="meta is not valid JSON"):
        load_population(path)
    assert json.loads(json.dumps(pop.meta))["calibration"] == "noisy"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reward": "ternary"}, "reward must be one of"),
        ({"calibration": "perfect"}, "calibration must be one of"),
        ({"noise": -1.0}, "noise must be a finite number >= 0"),
        ({"score_dim": 0}, "score_dim must be an int >= 1"),
    ],
)
def test_synthetic_population_validates_its_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        synthetic_population(2, 4, **kwargs)


def test_population_rejects_groups_of_one():
    with pytest.raises(ValueError, match="G >= 2 candidates"):
        Population(p_hat=[[0.5]], c_hat=[[1.0]], rewards=[[1.0]], costs=[[1.0]],
                   prefix_len=[[0]], scores=[[[1.0]]])
