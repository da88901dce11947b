"""drop_unselected_rows (issue 15): the update runs on the selected rows only, and the step is
exactly the one the masked full batch gives.

The identity is checked on whole optimizer steps in float64 (SGD, so the parameter change is
the gradient itself: Adam's first step would hide a wrong scale behind its normalisation), for
every loss type TRL 1.16 has, once with and once without dropping, from the same seed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pair_helpers import (
    TINY,
    RecordingReward,
    make_config,
    make_trainer,
    use_float64_logprobs,
)

from pairht.demo import toy
from pairht.torch.row_drop import (
    LOSS_SCALE_KEY,
    ROW_MEAN_LOSSES,
    TOKEN_NORMALISED_LOSSES,
    check_drop_rows,
    drop_rows,
    loss_scale,
)

pytest.importorskip("trl")

N_PROMPTS = 3
G = 6
RTOL = 1e-10

# (loss_type, extra config): practical mode for every loss but exact mode's dr_grpo; one case
# with two PPO epochs (old log-probs in the batch) and one with a KL term (reference log-probs).
CASES = [
    ("dr_grpo", {}),
    ("grpo", {"mode": "practical", "num_iterations": 2}),
    ("grpo", {"mode": "practical", "num_iterations": 1, "beta": 0.1}),
    ("sapo", {"mode": "practical", "num_iterations": 1}),
    ("luspo", {"mode": "practical", "num_iterations": 1, "importance_sampling_level": "sequence"}),
    ("bnpo", {"mode": "practical", "num_iterations": 1}),
    ("dapo", {"mode": "practical", "num_iterations": 2}),
    ("cispo", {"mode": "practical", "num_iterations": 1}),
    ("vespo", {"mode": "practical", "num_iterations": 1}),
]


def _run_one_step(tmp_path, drop: bool, loss_type: str, extra: dict):
    extra = dict(extra)
    beta = extra.pop("beta", 0.0)
    trainer = make_trainer(
        tmp_path / ("drop" if drop else "mask"),
        reward=RecordingReward(),
        double=True,
        n_prompts=N_PROMPTS,
        num_generations=G,
        per_device_train_batch_size=N_PROMPTS * G,
        loss_type=loss_type,
        optim="sgd",
        learning_rate=1.0,
        drop_unselected_rows=drop,
        **extra,
    )
    use_float64_logprobs(trainer)
    if beta:
        # TRL would load the reference model by hub name; the toy model has none, so give it
        # an in-memory one (another seed: a nonzero KL term) after construction.
        trainer.beta = beta
        trainer.ref_model = toy.make_model(seed=1, config=TINY).double().eval()
    seen: list[dict] = []
    real = trainer._compute_loss

    def recording(model, inputs):
        seen.append(dict(inputs))
        return real(model, inputs)

    trainer._compute_loss = recording
    before = [p.detach().clone() for p in trainer.model.parameters()]
    torch.manual_seed(0)
    trainer.train()
    delta = torch.cat([
        (p.detach() - b).reshape(-1) for p, b in zip(trainer.model.parameters(), before)
    ]).numpy()
    return trainer, delta, seen


@pytest.mark.parametrize(("loss_type", "extra"), CASES, ids=[
    f"{c[0]}-{'-'.join(f'{k}={v}' for k, v in c[1].items() if k != 'mode')}" for c in CASES
])
def test_dropping_rows_leaves_the_step_exactly_unchanged(tmp_path, loss_type, extra):
    masked, d_mask, seen_mask = _run_one_step(tmp_path, False, loss_type, extra)
    dropped, d_drop, seen_drop = _run_one_step(tmp_path, True, loss_type, extra)
    # Same draw, same completions: the two runs differ only in the update batch.
    a, b = masked.last_draw, dropped.last_draw
    assert np.array_equal(a.mask, b.mask) and np.array_equal(a.pi, b.pi)
    assert np.array_equal(np.nan_to_num(a.rewards), np.nan_to_num(b.rewards))
    mask = a.mask.reshape(-1)
    assert (~mask).any() and mask.sum() >= 2  # the fixture exercises the claim
    # The loss saw every row when masking, only the selected rows when dropping ...
    assert len(seen_mask) == len(seen_drop) == 1
    assert seen_mask[0]["prompt_ids"].shape[0] == N_PROMPTS * G
    batch = seen_drop[0]
    assert batch["prompt_ids"].shape[0] == int(mask.sum())
    assert torch.all(batch["completion_mask"].sum(-1) > 0)  # every kept row is a selected one
    # ... trimmed to the longest kept completion
    assert batch["completion_mask"][:, -1].any()
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1:
            assert value.shape[0] == int(mask.sum()), key
    expected_scale = mask.sum() / mask.size if loss_type in ROW_MEAN_LOSSES else 1.0
    assert float(batch[LOSS_SCALE_KEY]) == pytest.approx(expected_scale, rel=1e-15)
    if "beta" in extra:  # the KL term's reference log-probs were subset too
        assert batch["ref_per_token_logps"].shape == batch["completion_ids"].shape
    # The selected rows of the masked batch are the dropped batch's rows (TRL shuffles rows, so
    # compare them as sorted lists of (prompt, completion, advantage)).
    full = seen_mask[0]
    width = batch["completion_ids"].shape[1]
    sel = torch.as_tensor(full["completion_mask"].sum(-1) > 0)
    assert int(sel.sum()) == int(mask.sum())

    def rows(b, which):
        return sorted(
            (tuple(p), tuple(c), a) for p, c, a in zip(
                b["prompt_ids"][which].tolist(), b["completion_ids"][which][:, :width].tolist(),
                b["advantages"][which].tolist())
        )

    assert rows(full, sel) == rows(batch, slice(None))
    # The step itself: equal to float64 rounding, and not trivially zero.
    scale = np.abs(d_mask).max()
    assert scale > 1e-6
    np.testing.assert_allclose(d_drop, d_mask, rtol=RTOL, atol=RTOL * scale)


def test_default_drops_rows_when_exact_and_masks_otherwise(tmp_path):
    assert make_config(tmp_path).drop_unselected_rows is True
    # Two micro-batches per generation batch: TRL splits rows evenly, so masking stays.
    cfg = make_config(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=6)
    assert cfg.drop_unselected_rows is False
    with pytest.raises(ValueError, match="steps_per_generation must be 1"):
        make_config(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=6,
                    drop_unselected_rows=True)
    # A row-mean loss with an entropy bonus: the factor would rescale the bonus.
    kw = dict(mode="practical", loss_type="grpo", entropy_coef=0.01)
    assert make_config(tmp_path, **kw).drop_unselected_rows is False
    with pytest.raises(ValueError, match="rescale the entropy bonus"):
        make_config(tmp_path, drop_unselected_rows=True, **kw)
    # A token-normalised loss keeps the bonus exact.
    assert make_config(tmp_path, mode="practical", loss_type="dapo",
                       entropy_coef=0.01).drop_unselected_rows is True
    with pytest.raises(TypeError, match="drop_unselected_rows must be True or False"):
        make_config(tmp_path, drop_unselected_rows="yes")


def test_loss_scale_and_refusals():
    for lt in ROW_MEAN_LOSSES:
        assert loss_scale(lt, 3, 12) == 0.25
    for lt in TOKEN_NORMALISED_LOSSES:
        assert loss_scale(lt, 3, 12) == 1.0
    with pytest.raises(ValueError, match=r"kept_rows must lie in \[1, rows=12\]; got kept_rows=0"):
        loss_scale("grpo", 0, 12)
    with pytest.raises(ValueError, match="loss_type must be one of"):
        check_drop_rows("nope", 1, False)


def _batch(rows: int = 4, prompt: int = 3, completion: int = 5) -> dict:
    lengths = torch.tensor([5, 2, 0, 3])[:rows]
    cmask = (torch.arange(completion)[None, :] < lengths[:, None]).long()
    return {
        "prompt_ids": torch.arange(rows * prompt).reshape(rows, prompt),
        "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
        "completion_ids": torch.arange(rows * completion).reshape(rows, completion),
        "completion_mask": cmask,
        "advantages": torch.arange(rows, dtype=torch.float64),
        "old_per_token_logps": torch.randn(rows, completion),
        "importance_sampling_ratio": torch.ones(rows, 1),
        "token_type_ids": torch.zeros(rows, prompt + completion, dtype=torch.long),
        "num_items_in_batch": cmask.sum(),
    }


def test_drop_rows_subsets_and_trims_every_per_row_field():
    batch = _batch()
    out = drop_rows(batch, torch.tensor([False, True, False, True]), "dr_grpo")
    assert out["prompt_ids"].tolist() == batch["prompt_ids"][[1, 3]].tolist()
    assert out["completion_ids"].shape == (2, 3)  # longest kept completion: 3 tokens
    assert out["old_per_token_logps"].shape == (2, 3)
    assert out["importance_sampling_ratio"].shape == (2, 1)  # sequence level: not a column
    assert out["token_type_ids"].shape == (2, 3 + 3)
    assert out["advantages"].tolist() == [1.0, 3.0]
    assert out["num_items_in_batch"] is batch["num_items_in_batch"]
    assert float(out[LOSS_SCALE_KEY]) == 0.5
    assert batch["prompt_ids"].shape[0] == 4  # input untouched


def test_drop_rows_keeps_one_masked_row_when_none_is_selected():
    batch = _batch()
    batch["completion_mask"] = torch.zeros_like(batch["completion_mask"])
    out = drop_rows(batch, torch.zeros(4, dtype=torch.bool), "grpo")
    assert out["prompt_ids"].shape[0] == 1 and out["completion_ids"].shape[1] == 1
    assert float(out[LOSS_SCALE_KEY]) == 0.25


def test_drop_rows_refuses_fields_it_does_not_know():
    batch = _batch()
    batch["pixel_values"] = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"cannot subset the batch entries \['pixel_values'\]"):
        drop_rows(batch, torch.ones(4, dtype=torch.bool), "dapo")


def test_drop_rows_pads_with_masked_rows_to_min_rows():
    """Distributed runs need equal row counts: the first unkept rows fill up, masked, and the
    factor counts them (kept + filler over total)."""
    batch = _batch()
    batch["completion_mask"][0] = 0  # row 0 unselected (masked), as the trainer leaves it
    out = drop_rows(batch, torch.tensor([False, True, False, False]), "dr_grpo", min_rows=3)
    assert out["prompt_ids"].tolist() == batch["prompt_ids"][[0, 1, 2]].tolist()
    assert out["completion_mask"].sum(-1).tolist() == [0, 2, 0]
    assert float(out[LOSS_SCALE_KEY]) == 0.75
    with pytest.raises(ValueError, match=r"min_rows must lie in \[1, rows=4\]; got min_rows=5"):
        drop_rows(batch, torch.ones(4, dtype=torch.bool), "dapo", min_rows=5)
