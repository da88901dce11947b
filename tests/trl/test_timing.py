"""``pairht.trl.timing``: the per-step wall-clock split (issue 15, deliverable 1).

A scripted clock makes every figure exact: the tests check that phases are exclusive (nested
phases pause the outer one), that ``other`` is the remainder, and that :func:`instrument`
attributes TRL's seams and the optimizer step as documented. The end-to-end test runs a real
``PairGRPOTrainer`` and checks that every step logs a split whose phases add up to its total.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

from pairht.trl.timing import PHASES, StepTimer, format_split, instrument


class ScriptedClock:
    """A clock that returns 0, then advances by whatever the test adds with ``tick``."""

    def __init__(self) -> None:
        self.now = 0.0

    def tick(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_nested_phases_are_exclusive_and_other_is_the_remainder():
    clock = ScriptedClock()
    timer = StepTimer(clock)
    timer.start_step()
    clock.tick(1.0)  # outside every phase: other
    with timer.phase("update"):
        clock.tick(2.0)
        with timer.phase("heads"):
            clock.tick(4.0)
            with timer.phase("allocation"):
                clock.tick(8.0)
            clock.tick(16.0)
        clock.tick(32.0)
    split = timer.end_step()
    assert split is not None
    assert split["update"] == 34.0
    assert split["heads"] == 20.0
    assert split["allocation"] == 8.0
    assert split["other"] == 1.0
    assert split["total"] == 63.0
    assert sum(split[k] for k in PHASES) == split["total"]
    assert timer.steps == [split]


def test_steps_are_separate_and_mean_skips_leading_steps():
    clock = ScriptedClock()
    timer = StepTimer(clock)
    for seconds in (10.0, 2.0, 4.0):
        timer.start_step()
        with timer.phase("verifier"):
            clock.tick(seconds)
        timer.end_step()
    assert [s["verifier"] for s in timer.steps] == [10.0, 2.0, 4.0]
    mean = timer.mean(skip=1)
    assert mean["verifier"] == 3.0 and mean["total"] == 3.0 and mean["other"] == 0.0
    assert timer.mean(skip=3) == dict.fromkeys((*PHASES, "total"), 0.0)
    assert timer.end_step() is None  # no step open


def test_add_moves_seconds_measured_inside_another_phase():
    clock = ScriptedClock()
    timer = StepTimer(clock)
    timer.start_step()
    with timer.phase("prefix"):
        clock.tick(5.0)
    timer.add("features", 1.5, taken_from="prefix")
    split = timer.end_step()
    assert split is not None
    assert (split["prefix"], split["features"], split["total"]) == (3.5, 1.5, 5.0)


def test_a_phase_spanning_the_step_end_is_split_between_steps():
    clock = ScriptedClock()
    timer = StepTimer(clock)
    timer.start_step()
    with timer.phase("heads"):
        clock.tick(3.0)
        first = timer.end_step()
        timer.start_step()
        clock.tick(2.0)
    second = timer.end_step()
    assert first is not None and second is not None
    assert (first["heads"], first["total"]) == (3.0, 3.0)
    assert (second["heads"], second["total"]) == (2.0, 2.0)


@pytest.mark.parametrize("name", ["other", "decode", ""])
def test_unknown_phase_is_refused(name):
    timer = StepTimer()
    with pytest.raises(ValueError, match="phase must be one of"):
        with timer.phase(name):
            pass
    with pytest.raises(ValueError, match="phase must be one of"):
        timer.add(name, 1.0)


class FakeTrainer:
    """TRL's call structure: training_step -> _generate_and_score_completions ->
    (_generate_single_turn, _calculate_rewards); the optimizer step between the callbacks."""

    def __init__(self, clock: ScriptedClock) -> None:
        self.clock = clock
        self.callback_handler = SimpleNamespace(callbacks=["default"])
        self._metrics = {"train": defaultdict(list)}

    def _generate_single_turn(self):
        self.clock.tick(5.0)

    def _calculate_rewards(self):
        self.clock.tick(0.25)

    def _generate_and_score_completions(self):
        self.clock.tick(0.5)
        self._generate_single_turn()
        self._calculate_rewards()

    def training_step(self):
        self._generate_and_score_completions()
        self.clock.tick(3.0)  # loss forward and backward


def test_instrument_splits_trl_seams_and_logs_metrics():
    clock = ScriptedClock()
    trainer = FakeTrainer(clock)
    timer = instrument(trainer, StepTimer(clock))
    assert instrument(trainer) is timer  # a second call reuses the timer and callback
    callbacks = trainer.callback_handler.callbacks
    assert len(callbacks) == 2 and callbacks[1] == "default"  # ours runs first
    cb = callbacks[0]
    cb.on_step_begin(None, None, None)
    trainer.training_step()
    clock.tick(0.125)  # gradient clipping: no phase
    cb.on_pre_optimizer_step(None, None, None)
    clock.tick(1.0)  # optimizer step
    cb.on_optimizer_step(None, None, None)
    cb.on_step_end(None, None, None)
    (split,) = timer.steps
    assert split["generation"] == 5.0
    assert split["verifier"] == 0.25
    assert split["scoring"] == 0.5
    assert split["update"] == 4.0
    assert split["other"] == 0.125
    assert split["total"] == 9.875
    logged = trainer._metrics["train"]
    assert logged["pair/time_update"] == [4.0]
    assert logged["pair/time_total"] == [9.875]
    assert set(logged) == {f"pair/time_{k}" for k in (*PHASES, "total")}


def test_format_split_shows_seconds_and_shares():
    text = format_split({
        "GRPO": {**dict.fromkeys(PHASES, 0.0), "generation": 0.75, "update": 0.25, "total": 1.0},
        "PAIR": {**dict.fromkeys(PHASES, 0.0), "prefix": 0.2, "update": 0.3, "total": 0.5},
    })
    lines = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    assert lines["generation"] == ["generation", "750.0", "75.0%", "0.0", "0.0%"]
    assert lines["prefix"] == ["prefix", "0.0", "0.0%", "200.0", "40.0%"]
    assert lines["total"] == ["total", "1000.0", "100.0%", "500.0", "100.0%"]
    assert "heads" not in lines  # phases zero in every column are left out


def test_pair_trainer_logs_a_split_that_adds_up(tmp_path):
    from pair_helpers import make_trainer

    trainer = make_trainer(tmp_path, max_steps=2, per_device_train_batch_size=12, n_prompts=8)
    trainer.train()
    steps = trainer.step_timer.steps
    assert len(steps) == 2
    for split in steps:
        assert split["total"] > 0
        assert sum(split[k] for k in PHASES) == pytest.approx(split["total"], rel=1e-9)
        for phase in ("prefix", "features", "heads", "allocation", "continuation",
                      "verifier", "update"):
            assert split[phase] > 0, phase
    logged = [e for e in trainer.state.log_history if "pair/time_total" in e]
    assert [e["step"] for e in logged] == [1, 2]
    assert [e["pair/time_total"] for e in logged] == [s["total"] for s in steps]
