"""monitors.numerics (_numerics.py) and the perturb_activation fault: every
module's numbers in `step_end`, and a planted change that shows in them at its
step and module."""

from __future__ import annotations

from typing import Any

import pytest

from fakes import of, train_plain


def _numerics(supervisor: Any, faults: list[dict[str, Any]] | None = None) -> list[list[dict[str, Any]]]:
    sup = supervisor(monitors={"mode": "cheap", "numerics": True}, faults=faults or [])
    train_plain(sup.connect(), steps=4)
    return [e["numerics"] for e in of(sup.events(), "step_end")]


def test_every_module_has_its_numbers_in_forward_order(supervisor: Any) -> None:
    steps = _numerics(supervisor)
    assert len(steps) == 4
    names = [m["module"] for m in steps[0]]
    # A container's output comes after the modules inside it.
    assert names == ["stem", "body.0", "body.1", "body", "head"]
    by_name = {m["module"]: m for m in steps[0]}
    assert by_name["stem"]["act"] > 0 and by_name["stem"]["grad"] > 0
    assert "grad" not in by_name["body"] and "grad" not in by_name["body.1"]  # no parameters of their own
    assert steps[1] != steps[0]  # the model trained


def test_without_numerics_step_end_has_none(supervisor: Any) -> None:
    sup = supervisor(monitors={"mode": "cheap"})
    train_plain(sup.connect(), steps=4)
    assert all("numerics" not in e for e in of(sup.events(), "step_end"))


def test_a_perturbation_shows_at_its_step_and_module_and_not_before(supervisor: Any) -> None:
    clean = _numerics(supervisor)
    moved = _numerics(supervisor, [{"name": "perturb_activation", "module": "body.0", "at_step": 2,
                                    "until_step": 1000, "relative": 0.01}])
    assert moved[:2] == clean[:2]  # bit for bit before it
    step2 = {m["module"]: m for m in moved[2]}
    clean2 = {m["module"]: m for m in clean[2]}
    assert step2["stem"]["act"] == clean2["stem"]["act"]  # the output before it is untouched at its step
    assert step2["body.0"]["act"] == pytest.approx(clean2["body.0"]["act"] * 1.01, rel=1e-6)


def test_a_later_trial_is_jittered_and_trial_zero_is_not(supervisor: Any) -> None:
    def first_step(trial: str) -> list[dict[str, Any]]:
        sup = supervisor(monitors={"mode": "cheap", "numerics": True, "numerics_jitter": 1e-3}, env={"DBH_TRIAL": trial})
        train_plain(sup.connect(), steps=4)
        first: list[dict[str, Any]] = of(sup.events(), "step_end")[0]["numerics"]
        return first
    plain, again, jittered = first_step("0"), first_step("0"), first_step("3")
    assert plain == again  # no jitter: bit for bit
    assert plain[0]["act"] == jittered[0]["act"]  # the first output is measured before its jitter
    assert plain[1]["act"] != jittered[1]["act"]  # the next one sees it
