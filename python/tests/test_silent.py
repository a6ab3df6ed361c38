"""The silent-failure check on any model (_silent.py): predictions collapsed,
read from the model's own output."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dbh_adapter._session import capabilities
from dbh_adapter._faults import batch_target
from dbh_adapter._silent import first_tensor
from fakes import TinyNet, of, train_plain, types


class Saturated(nn.Module):
    """TinyNet whose logits are pushed to `shift`: sigmoid 0 (or 1) everywhere."""

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.net = TinyNet()
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x) + self.shift
        return out


MONITORS = {"mode": "cheap", "silent": ["predictions"], "collapse_after": 1, "collapse_steps": 2,
            "collapse_margin": 0.02}


@pytest.mark.parametrize("shift, to", [(-50.0, "0"), (50.0, "1")])
def test_collapsed_predictions_stop_the_run_as_a_silent_failure(supervisor: Any, shift: float, to: str) -> None:
    assert "monitors.silent" in capabilities()
    sup = supervisor(monitors=MONITORS, train={"max_steps": 6})
    with pytest.raises(Exception) as raised:
        train_plain(sup.connect(), steps=6, model=Saturated(shift), lr=0.0)
    assert f"predictions collapsed to {to} over steps 1-2" in str(raised.value)
    events = sup.events()
    assert types(events)[-3:] == ["health", "error", "done"]
    health = of(events, "health")[0]
    assert health["check"] == "predictions_collapsed" and health["primary"] is True and health["step"] == 2
    assert health["kind"] == "prediction" and health["steps"] == 2 and len(health["evidence"]) == 2
    assert of(events, "error")[0]["kind"] == "silent"
    assert events[-1]["status"] == "failed"


def test_predictions_that_move_pass_and_the_check_can_be_off(supervisor: Any) -> None:
    sup = supervisor(monitors=MONITORS, train={"max_steps": 6})
    train_plain(sup.connect(), steps=6)
    assert sup.events()[-1]["status"] == "passed"
    off = supervisor(monitors={**MONITORS, "silent": ["learning"]}, train={"max_steps": 6})
    train_plain(off.connect(), steps=6, model=Saturated(-50.0), lr=0.0)
    assert off.events()[-1]["status"] == "passed"


def test_a_batch_without_anything_to_find_is_not_counted(supervisor: Any) -> None:
    data = [{"image": torch.randn(4, 1, 8, 8), "target": torch.zeros(4, 1), "id": [f"s{i}" for i in range(4)]}
            for _ in range(6)]
    sup = supervisor(monitors=MONITORS, train={"max_steps": 6})
    train_plain(sup.connect(), steps=6, model=Saturated(-50.0), lr=0.0, data=data)
    assert sup.events()[-1]["status"] == "passed"


def test_outputs_and_targets_are_found_in_the_usual_shapes() -> None:
    t = torch.ones(2)
    assert first_tensor({"logits": t, "aux": torch.zeros(1)}) is t
    assert first_tensor((torch.ones(2, dtype=torch.long), [t])) is t
    assert first_tensor("text") is None
    assert batch_target((torch.zeros(1), t, 3)) is t
    assert batch_target({"image": torch.zeros(1), "mask": t}) is t
    assert batch_target({"image": torch.zeros(1)}) is None
