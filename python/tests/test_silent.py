"""The silent-failure checks on any model (_silent.py): predictions
collapsed, read from the model's own output, and a target map with nothing
to find, read from the batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from dbh_adapter._session import capabilities
from dbh_adapter._faults import batch_target, target_entry
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
    # A training mask comes after the map it masks.
    assert target_entry({"image": torch.zeros(1), "mask": torch.zeros(1), "gt": t}) == ("batch['gt']", t)
    assert target_entry((torch.zeros(1), t)) == ("batch[1]", t)
    assert batch_target({"image": torch.zeros(1)}) is None


def maps(steps: int, empty_from: int = 0) -> list[dict[str, Any]]:
    """Segmentation batches: 8x8 images, a `gt` map (regions of 1 until step
    `empty_from`, 0 everywhere from it) and a training `mask` of 1."""
    g = torch.Generator().manual_seed(0)
    out = []
    for b in range(steps):
        gt = torch.zeros(2, 1, 8, 8)
        if b < empty_from:
            gt[:, :, 2:5, 2:6] = 1.0
        out.append({"image": torch.randn(2, 1, 8, 8, generator=g), "gt": gt, "mask": torch.ones(2, 1, 8, 8),
                    "id": [f"s{b * 2 + i}" for i in range(2)]})
    return out


def train_maps(session: Any, data: list[dict[str, Any]]) -> None:
    """A per-pixel training (one convolution, BCE on the gt map) through the plain loop."""
    torch.manual_seed(0)
    model = nn.Conv2d(1, 1, 3, padding=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with session as dbh:
        dbh.watch(model, optimizer)
        for _, batch in dbh.steps(data, max_steps=len(data)):
            loss = nn.functional.binary_cross_entropy_with_logits(model(batch["image"]), batch["gt"],
                                                                  weight=batch["mask"])
            dbh.backward(loss)
            dbh.optimizer_step(samples=2)


LABELS = {"mode": "cheap", "silent": ["labels"], "collapse_steps": 3}


def test_a_target_map_empty_from_the_first_step_is_labels_without_anything_to_find(supervisor: Any) -> None:
    sup = supervisor(monitors=LABELS, train={"max_steps": 6})
    with pytest.raises(Exception) as raised:
        train_maps(sup.connect(), maps(6))
    assert "the target batch['gt'] is 0 everywhere in every batch from the run's first step through step 2" \
        in str(raised.value)
    events = sup.events()
    assert types(events)[-3:] == ["health", "error", "done"]
    health = of(events, "health")[0]
    assert health["check"] == "labels_degenerate" and health["kind"] == "label" and health["site"] == "batch['gt']"
    assert health["step"] == 2 and health["steps"] == 3 and health["shape"] == [2, 1, 8, 8]
    assert [e["step"] for e in of(events, "step_end")] == [0, 1, 2]
    assert events[-1]["status"] == "failed"


@pytest.mark.parametrize("monitors, data", [
    (LABELS, maps(6, empty_from=1)),  # regions in the first batch: the pipeline draws targets
    ({**LABELS, "collapse_steps": 7}, maps(6)),  # shorter than the check's steps
    ({**LABELS, "silent": ["predictions"]}, maps(6)),  # the check is off
], ids=["something_at_the_start", "run_shorter_than_the_check", "labels_off"])
def test_a_target_map_with_something_at_the_start_or_the_check_off_passes(
        supervisor: Any, monitors: dict[str, Any], data: list[dict[str, Any]]) -> None:
    sup = supervisor(monitors=monitors, train={"max_steps": 6})
    train_maps(sup.connect(), data)
    assert sup.events()[-1]["status"] == "passed"


def test_a_target_of_one_value_per_sample_is_not_a_map(supervisor: Any) -> None:
    # Class indices or flags of 0 in a few batches in a row are ordinary.
    data = [{"image": torch.randn(4, 1, 8, 8), "target": torch.zeros(4, 1), "id": [f"s{i}" for i in range(4)]}
            for _ in range(6)]
    sup = supervisor(monitors=LABELS, train={"max_steps": 6})
    train_plain(sup.connect(), steps=6, data=data)
    assert sup.events()[-1]["status"] == "passed"
