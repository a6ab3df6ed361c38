"""dbh's faults on a user's model (_faults.py) and the fp16 loss scaler's
skipped steps (Note [Loss-scaler skips], _frame.py)."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
import torch
from torch.amp.grad_scaler import GradScaler

from dbh_adapter import Finding
from dbh_adapter._faults import parse_bytes
from dbh_adapter._protocol import SCALER_SKIP_LIMIT
from fakes import TinyNet, batches, of, train_plain, types


def _updates(supervisor: Any, faults: list[dict[str, Any]]) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """Steps 0 to 2: the size of each one's parameter update and the lr after it; the events."""
    sup = supervisor(faults=faults, monitors={"mode": "off"})
    sizes: list[float] = []
    lrs: list[float] = []
    before: list[torch.Tensor] = []

    def on_step(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if before:
            sizes.append(sum(float((p.detach() - b).abs().sum()) for p, b in zip(model.parameters(), before)))
            lrs.append(optimizer.param_groups[0]["lr"])
        before[:] = [p.detach().clone() for p in model.parameters()]

    train_plain(sup.connect(), steps=4, on_step=on_step)
    return sizes, lrs, sup.events()


def test_lr_spike_multiplies_one_steps_learning_rate_and_restores_it(supervisor: Any) -> None:
    plain, plain_lrs, _ = _updates(supervisor, [])
    spiked, lrs, events = _updates(supervisor, [{"name": "lr_spike", "at_step": 1, "factor": 100}])
    assert lrs == plain_lrs == [0.05, 0.05, 0.05]  # restored after the step
    assert spiked[1] / plain[1] == pytest.approx(100, rel=1e-3)  # step 1's update
    assert spiked[0] == plain[0]
    fired = of(events, "fault_fired")
    assert [(f["fault"], f["step"]) for f in fired] == [("lr_spike", 1)]
    assert [e["lr"] for e in of(events, "step_end")] == [0.05] * 4


def test_lr_freeze_holds_the_parameters_for_its_steps(supervisor: Any) -> None:
    sizes, _, events = _updates(supervisor, [{"name": "lr_freeze", "at_step": 1, "until_step": 2}])
    assert sizes[0] > 0 and sizes[1] == 0 and sizes[2] == 0
    assert [f["step"] for f in of(events, "fault_fired")] == [1, 2]


def test_a_fault_on_a_module_the_model_lacks_is_refused(supervisor: Any) -> None:
    sup = supervisor(faults=[{"name": "nan_activation", "module": "decoder", "at_step": 0}])
    with pytest.raises(ValueError, match="faults.0.module: expected a module of the model, got 'decoder'"):
        train_plain(sup.connect(), steps=4)


def _scaled_run(supervisor: Any, until: int) -> tuple[list[dict[str, Any]], BaseException | None]:
    sup = supervisor(train={"max_steps": 12, "precision": "fp16"},
                     faults=[{"name": "nan_gradient", "at_step": 2, "until_step": until}])
    scaler = GradScaler("cpu", init_scale=1024.0)
    raised = None
    try:
        train_plain(sup.connect(), steps=12, data=None, scaler=scaler)
    except Finding as e:
        raised = e
    return sup.events(), raised


def test_a_step_the_loss_scaler_skips_is_recorded_not_a_divergence(supervisor: Any) -> None:
    events, raised = _scaled_run(supervisor, until=2)
    assert raised is None and events[-1]["status"] == "passed"
    health = of(events, "health")
    assert len(health) == 1
    assert health[0]["check"] == "loss_scaler" and health[0]["primary"] is False and health[0]["step"] == 2
    assert health[0]["skipped_in_a_row"] == 1 and health[0]["limit"] == SCALER_SKIP_LIMIT
    ends = {e["step"]: e for e in of(events, "step_end")}
    assert len(ends) == 12 and ends[2]["skipped"] is True and ends[1]["skipped"] is False
    assert ends[2]["loss_scale"] == 1024.0 and ends[3]["loss_scale"] == 512.0  # halved after the skip
    # Measured, and not finite: JSON carries no NaN, so the norm is left out and its bits say it.
    assert "grad_norm" not in ends[2] and math.isnan(struct.unpack("<f", struct.pack("<I", ends[2]["grad_norm_bits"]))[0])


def test_eight_skipped_steps_in_a_row_are_a_divergence_from_the_first(supervisor: Any) -> None:
    events, raised = _scaled_run(supervisor, until=11)
    assert isinstance(raised, Finding)
    assert raised.step == 2 and raised.extra == {"loss_scaler_skips": SCALER_SKIP_LIMIT}
    assert f"skipped {SCALER_SKIP_LIMIT} steps in a row" in str(raised)
    assert [h["skipped_in_a_row"] for h in of(events, "health")[:-1]] == list(range(1, SCALER_SKIP_LIMIT + 1))
    primary = of(events, "health")[-1]
    assert primary["primary"] is True and primary["step"] == 2 and primary["loss_scaler_skips"] == 8
    assert types(events)[-2:] == ["error", "done"] and of(events, "error")[0]["step"] == 2


class _FakeScaler:
    """A loss scaler that is on but never overflows: what the frame reads."""

    def is_enabled(self) -> bool:
        return True

    def get_scale(self) -> float:
        return 8.0


def test_without_a_scaler_non_finite_gradients_diverge_at_once(supervisor: Any) -> None:
    sup = supervisor(faults=[{"name": "nan_gradient", "at_step": 1}])
    dbh = sup.connect()
    with pytest.raises(Finding):
        train_plain(dbh, steps=4)
    assert of(sup.events(), "health")[0]["check"] == "finite"


def test_a_custom_loop_drives_the_frame_with_its_own_scaler(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 1})
    dbh = sup.connect()
    model = TinyNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = batches(1)[0]
    dbh.hello(model)
    dbh.begin_step(0, batch)
    loss = torch.nn.functional.mse_loss(model(batch["image"]), batch["target"])
    dbh.loss(loss)
    dbh.record_loss(loss)
    loss.backward()  # type: ignore[no-untyped-call]  # unannotated in torch
    dbh.after_backward(model)
    dbh.before_optimizer_step(model, optimizer, scaler=_FakeScaler())
    optimizer.step()
    dbh.after_optimizer_step(optimizer)
    dbh.end_step(lr=0.1, samples=4)
    assert dbh.stop_requested
    dbh.done()
    events = sup.events()
    assert types(events) == ["hello", "run_begin", "step_begin", "batch", "step_end", "run_end", "done"]
    end = of(events, "step_end")[0]
    assert end["loss_scale"] == 8.0 and end["skipped"] is False and end["loss"] == pytest.approx(loss.item())


@pytest.mark.parametrize("text, want", [(1024, 1024), ("96MiB", 96 * 2**20), ("1GiB", 2**30), ("500MB", 500 * 10**6),
                                        ("2048", 2048), ("1.5KiB", 1536)])
def test_leak_sizes_are_read_as_dbh_writes_them(text: Any, want: int) -> None:
    assert parse_bytes(text) == want


def test_a_size_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a size such as 64MiB"):
        parse_bytes("lots")


def test_nan_label_sets_nan_in_the_batchs_own_target_and_is_named_as_the_label(supervisor: Any) -> None:
    sup = supervisor(faults=[{"name": "nan_label", "at_step": 1, "sample": 0, "count": 1}], train={"max_steps": 3})
    with pytest.raises(Finding) as raised:
        train_plain(sup.connect(), steps=3)
    # Named where it entered (the batch's target), not as the loss it makes non-finite.
    assert raised.value.kind == "label" and raised.value.step == 1
    assert raised.value.site.startswith("batch[")
    events = sup.events()
    fired = of(events, "fault_fired")
    assert [f["step"] for f in fired] == [1] and fired[0]["fault"] == "nan_label"
    assert events[-1]["status"] == "diverged"


def test_nan_label_without_a_readable_target_is_refused(supervisor: Any) -> None:
    sup = supervisor(faults=[{"name": "nan_label", "at_step": 0}], train={"max_steps": 1})
    images_only = [{"image": b["image"], "id": b["id"]} for b in batches(1)]
    with pytest.raises(ValueError, match="nan_label: expected a batch holding a floating-point target"):
        train_plain(sup.connect(), steps=1, data=images_only)
