"""Fixtures for the verifier tests: a containment log printed in the terminal summary."""

from __future__ import annotations

import pytest

_CONTAINMENT: list[tuple[str, str, float]] = []


@pytest.fixture
def containment_log():
    """Record ``(attack, verdicts, seconds until stopped)``; printed after the run."""

    def record(attack: str, verdict: str, seconds: float) -> None:
        _CONTAINMENT.append((attack, verdict, seconds))

    return record


def pytest_terminal_summary(terminalreporter):
    if not _CONTAINMENT:
        return
    terminalreporter.section("sandbox containment (attack, verdict, seconds until stopped)")
    for attack, verdict, seconds in _CONTAINMENT:
        terminalreporter.write_line(f"{attack:<40s} {verdict:<28s} {seconds:6.2f}")
