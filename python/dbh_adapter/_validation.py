"""The training's own validation metrics as dbh's `eval` events (capability
`validation`): whatever the training logs after a validation, with the
h-mean, precision and recall that dbh's checks read found by name (Note [A
worker's own validation metrics] in harness/supervisor/outcome.cc)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# At most this many metrics per evaluation, each name cut at 200 bytes.
MAX_METRICS = 64
MAX_NAME = 200

# The names a training gives dbh's three metrics, once a validation prefix
# (`val/`, `val_`, `validation/`, `valid_`) is taken off, lower case.
_NAMES = {
    "hmean": ("hmean", "h_mean", "f1", "f1_score", "fscore", "f_score", "fmeasure", "f_measure"),
    "precision": ("precision", "prec"),
    "recall": ("recall", "rec"),
}
_PREFIX = re.compile(r"^(val|valid|validation|eval)[/_.\-]", re.IGNORECASE)


def _number(value: Any) -> float | None:
    try:
        x = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return x if math.isfinite(x) else None


def validation_metrics(logged: Mapping[str, Any], prefixed_only: bool = False) -> dict[str, float]:
    """The numeric metrics of a validation, by the training's own names
    (finite numbers only). With `prefixed_only` (Lightning's callback
    metrics, which hold the training's too) only names with a validation
    prefix, or named as dbh's three metrics."""
    out: dict[str, float] = {}
    for name, value in logged.items():
        key = str(name)[:MAX_NAME]
        if prefixed_only and not _PREFIX.match(key) and _dbh_name(key) is None:
            continue
        x = _number(value)
        if x is not None and len(out) < MAX_METRICS:
            out[key] = x
    return out


def _dbh_name(name: str) -> str | None:
    bare = _PREFIX.sub("", name).lower().replace("-", "_")
    for dbh_name, names in _NAMES.items():
        if bare in names:
            return dbh_name
    return None


def eval_fields(metrics: Mapping[str, float]) -> dict[str, Any]:
    """The `eval` event's fields for `metrics`: `metrics` itself, and
    `precision`, `recall`, `hmean` where a metric is named as one of them."""
    fields: dict[str, Any] = {"metrics": dict(metrics)}
    for name, value in metrics.items():
        dbh_name = _dbh_name(name)
        if dbh_name is not None and dbh_name not in fields:
            fields[dbh_name] = value
    return fields
