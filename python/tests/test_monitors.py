"""The finite monitors (_monitors.py): the first non-finite value, attributed
to its module and step, in cheap and localise mode."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
import torch

from dbh_adapter import Finding
from dbh_adapter._monitors import FiniteMonitor, batch_tensors
from fakes import TinyNet, of, train_plain, types


@pytest.mark.parametrize("mode", ["cheap", "localise"])
def test_a_nan_activation_is_attributed_to_its_module_and_step(supervisor: Any, mode: str) -> None:
    sup = supervisor(monitors={"mode": mode}, faults=[{"name": "nan_activation", "module": "body.0", "at_step": 2}])
    with pytest.raises(Finding) as caught:
        train_plain(sup.connect(), steps=4)
    assert (caught.value.kind, caught.value.module, caught.value.step) == ("activation", "body.0", 2)
    events = sup.events()
    fired = of(events, "fault_fired")
    assert len(fired) == 1 and fired[0]["fault"] == "nan_activation" and fired[0]["step"] == 2
    assert fired[0]["module"] == "body.0" and fired[0]["index"] == 0
    health = of(events, "health")[0]
    assert health["check"] == "finite" and health["primary"] is True and health["mode"] == mode
    assert (health["kind"], health["module"], health["step"], health["site"]) == ("activation", "body.0", 2,
                                                                                 "body.0 output")
    error = of(events, "error")[0]
    assert (error["kind"], error["module"], error["step"]) == ("diverged", "body.0", 2)
    assert types(events)[-3:] == ["health", "error", "done"] and events[-1]["status"] == "diverged"
    assert [e["step"] for e in of(events, "step_end")] == [0, 1]
    if mode == "localise":  # the module that ran before it, and the tensor's statistics
        assert health["input_module"] == "stem" and health["stats"]["nan"] > 0
    else:
        assert health["nonfinite_sites"]["activation"] >= 1


@pytest.mark.parametrize("mode", ["cheap", "localise"])
def test_a_nan_gradient_is_attributed_to_its_module(supervisor: Any, mode: str) -> None:
    sup = supervisor(monitors={"mode": mode}, faults=[{"name": "nan_gradient", "module": "head", "at_step": 1}])
    with pytest.raises(Finding) as caught:
        train_plain(sup.connect(), steps=4)
    assert (caught.value.kind, caught.value.module, caught.value.step) == ("gradient", "head", 1)
    assert caught.value.site in ("head.weight.grad", "head.bias.grad")
    events = sup.events()
    assert of(events, "fault_fired")[0]["detail"] == {"parameters": 2}
    assert of(events, "error")[0]["module"] == "head" and events[-1]["status"] == "diverged"


@pytest.mark.parametrize("mode", ["cheap", "localise"])
def test_a_nan_in_the_batchs_target_is_the_label_not_the_loss(supervisor: Any, mode: str) -> None:
    sup = supervisor(monitors={"mode": mode}, faults=[{"name": "nan_label", "at_step": 2, "count": 1}])
    with pytest.raises(Finding) as caught:
        train_plain(sup.connect(), steps=4)
    assert (caught.value.kind, caught.value.step) == ("label", 2)
    health = of(sup.events(), "health")[0]
    assert health["kind"] == "label" and health["site"] == caught.value.site and "module" not in health


def test_every_floating_tensor_of_a_batch_is_found_whatever_its_structure() -> None:
    image, mask, weights = torch.zeros(1, 3, 4, 4), torch.zeros(1, 4, 4), torch.ones(1)
    batch = {"image": image, "maps": [mask, {"w": weights}], "ids": torch.tensor([3]), "name": "a"}
    assert [site for site, _ in batch_tensors(batch)] == ["batch['image']", "batch['maps'][0]",
                                                          "batch['maps'][1]['w']"]
    assert [site for site, _ in batch_tensors((image, mask))] == ["batch[0]", "batch[1]"]
    deep: Any = mask
    for _ in range(10):
        deep = [deep]
    assert batch_tensors(deep) == []  # deeper than a batch is walked
    assert len(batch_tensors([torch.zeros(1)] * 100)) == 32


def test_a_nan_input_is_the_batchs(supervisor: Any) -> None:
    sup = supervisor(faults=[{"name": "nan_input", "at_step": 0, "count": 3}])
    with pytest.raises(Finding) as caught:
        train_plain(sup.connect(), steps=4)
    assert (caught.value.kind, caught.value.site, caught.value.step) == ("input", "batch input", 0)
    health = of(sup.events(), "health")[0]
    assert health["kind"] == "input" and "module" not in health


def bits_float(bits: int) -> float:
    """The float32 a bit pattern holds."""
    value: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return value


def test_monitors_off_find_nothing(supervisor: Any) -> None:
    sup = supervisor(monitors={"mode": "off"},
                     faults=[{"name": "nan_activation", "module": "body.0", "at_step": 1}])
    train_plain(sup.connect(), steps=4)
    events = sup.events()
    assert "health" not in types(events) and events[-1]["status"] == "passed"
    ends = of(events, "step_end")
    # NaN from step 1 on, unchecked: JSON carries no NaN, so the loss is left out and its bits say it.
    assert "loss" in ends[0] and "loss" not in ends[1] and math.isnan(bits_float(ends[1]["loss_bits"]))


def test_one_read_gives_the_finding_and_the_total_gradient_norm() -> None:
    model = TinyNet()
    monitor = FiniteMonitor("cheap")
    monitor.attach(model)
    monitor.begin_step(0)
    assert monitor.read().grad_norm is None  # nothing checked yet
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    monitor.check_gradients(model)
    reading = monitor.read()
    assert reading.finding is None
    want = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    assert reading.grad_norm == pytest.approx(float(want), rel=1e-6)
    model.head.bias.grad.fill_(float("inf"))  # type: ignore[union-attr]
    monitor.begin_step(1)
    monitor.check_gradients(model)
    reading = monitor.read()
    assert reading.finding is not None and reading.finding.site == "head.bias.grad"
    assert reading.grad_norm == float("inf")


class _Split(torch.nn.Module):
    """A container whose output is its children's outputs, as an encoder's
    feature maps are."""

    def __init__(self) -> None:
        super().__init__()
        self.low = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.high = torch.nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = self.low(x)
        return low, self.high(low)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = _Split()
        self.head = torch.nn.Conv2d(2, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low, high = self.encoder(x)
        out: torch.Tensor = self.head(low + high)
        return out


def test_a_containers_output_made_of_its_childrens_is_checked_once() -> None:
    model = _Net()
    monitor = FiniteMonitor("cheap")
    monitor.attach(model)  # every module: none is deeper than two levels
    monitor.begin_step(0)
    model(torch.randn(2, 1, 8, 8))
    # encoder.low, encoder.high and head: the encoder's tuple holds nothing new.
    assert [site for _, site, _, _ in monitor._flags] == ["encoder.low output", "encoder.high output", "head output"]
    with torch.no_grad():
        model.encoder.high.weight.fill_(float("nan"))
    monitor.begin_step(1)
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    monitor.check_gradients(model)
    reading = monitor.read()
    assert reading.finding is not None
    assert (reading.finding.site, reading.finding.step) == ("encoder.high output", 1)
    assert monitor.sites()["gradient"] == sum(1 for p in model.parameters() if p.grad is not None
                                              and not bool(torch.isfinite(p.grad).all()))
