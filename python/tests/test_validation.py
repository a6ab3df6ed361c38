"""The training's own validation metrics as `eval` events (_validation.py)."""

from __future__ import annotations

import math
from typing import Any

import torch

from dbh_adapter._session import capabilities
from dbh_adapter._validation import MAX_METRICS, eval_fields, validation_metrics
from fakes import of, train_plain


def test_dbhs_three_metrics_are_found_by_the_trainings_own_names() -> None:
    fields = eval_fields({"val/prec": 0.5, "val_recall": 0.25, "val/F1": 0.3, "val/iou": 0.2})
    assert fields["precision"] == 0.5 and fields["recall"] == 0.25 and fields["hmean"] == 0.3
    assert fields["metrics"] == {"val/prec": 0.5, "val_recall": 0.25, "val/F1": 0.3, "val/iou": 0.2}
    only_iou = eval_fields({"val_iou": 0.0})
    assert "hmean" not in only_iou and only_iou["metrics"] == {"val_iou": 0.0}


def test_only_finite_numbers_are_kept_and_lightnings_training_metrics_are_not_validation() -> None:
    logged: dict[str, Any] = {"val/f1": torch.tensor(0.5), "val/nan": math.nan, "val/text": "x", "train_loss": 1.0,
                              "hmean": 0.1}
    assert validation_metrics(logged) == {"val/f1": 0.5, "train_loss": 1.0, "hmean": 0.1}
    assert validation_metrics(logged, prefixed_only=True) == {"val/f1": 0.5, "hmean": 0.1}
    assert len(validation_metrics({f"val/m{i}": i for i in range(MAX_METRICS + 5)})) == MAX_METRICS


def test_report_validation_writes_an_eval_after_the_steps_trained(supervisor: Any) -> None:
    assert "validation" in capabilities()
    sup = supervisor(train={"max_steps": 2})
    dbh = sup.connect()
    train_plain(dbh, steps=2, after_step=lambda step: dbh.report_validation({"val/f1": 0.0, "val/loss": 2.0}))
    evals = of(sup.events(), "eval")
    assert [e["step"] for e in evals] == [1, 2]
    assert evals[0]["hmean"] == 0.0 and evals[0]["metrics"] == {"val/f1": 0.0, "val/loss": 2.0}
    assert "precision" not in evals[0] and "gt" not in evals[0]
