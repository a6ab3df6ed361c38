"""`train.mode: ops` (_ops.py): basic tensor operations instead of the
training, the first rung of dbh's diagnosis ladder."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dbh_adapter
from dbh_adapter._ops import OPS_STEPS, ops_step
from dbh_adapter._session import capabilities
from fakes import TinyNet, of, run_forked, types


def _train(env: dict[str, str]) -> None:
    with dbh_adapter.connect(env) as dbh:
        dbh.watch(TinyNet())
    raise SystemExit(5)  # the user's training: never reached in ops mode


def test_ops_mode_runs_the_check_and_never_the_training(supervisor: Any) -> None:
    assert "ops" in capabilities()
    sup = supervisor(train={"mode": "ops"})
    assert run_forked(_train, sup.env) == 0
    events = sup.events()
    assert types(events) == ["hello"] + ["step_begin", "step_end"] * OPS_STEPS + ["done"]
    assert all(e["ops"] is True for e in of(events, "step_end"))
    assert events[-1]["status"] == "passed"


def test_a_non_finite_result_is_the_checks_error(supervisor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.Tensor, "item", lambda self: float("nan"))
    sup = supervisor(train={"mode": "ops"})
    assert run_forked(_train, sup.env) == 1
    events = sup.events()
    error = of(events, "error")[0]
    assert error["phase"] == "ops" and error["step"] == 0 and "non-finite values on cpu" in error["message"]
    assert events[-1]["status"] == "error"


def test_one_step_is_a_convolution_and_a_matrix_product_with_backward() -> None:
    torch.manual_seed(0)
    first = ops_step(torch.device("cpu"))
    torch.manual_seed(0)
    assert ops_step(torch.device("cpu")) == first
