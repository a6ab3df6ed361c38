"""The training's own composed configuration, as `hello` reports it (`config`):
dbh's `scenario from-command --external` finds its keys in it by name and by
what they hold (Note [dbh's keys in your configuration] in
harness/scenario/user_config.h)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

# What one `hello` carries of it: dbh keeps at most 4096 keys, each value's
# text at most 1000 bytes; the adapter stops before the line grows past that.
MAX_KEYS = 4096
MAX_LIST_ITEMS = 64
MAX_TEXT = 1000

Scalar = bool | int | float | str


def _scalar(value: Any) -> Scalar | None:
    if isinstance(value, os.PathLike):  # argparse's type=Path: the path as written
        value = os.fspath(value)
        value = value if isinstance(value, str) else None
    if isinstance(value, bool | int | str):
        return value[:MAX_TEXT] if isinstance(value, str) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # JSON has no NaN
    return None


def flatten_config(config: Mapping[str, Any]) -> dict[str, Scalar | list[Scalar]]:
    """`config` (a dict, a Hydra DictConfig, any Mapping) as dotted keys and
    JSON values: nested mappings joined with '.', scalars and short lists of
    scalars kept, anything else left out."""
    out: dict[str, Scalar | list[Scalar]] = {}

    def walk(prefix: str, node: Any, depth: int) -> None:
        if len(out) >= MAX_KEYS or depth > 32:
            return
        if isinstance(node, Mapping):
            for key in node:
                try:
                    child = node[key]
                except Exception:  # an interpolation that does not resolve: left out
                    continue
                walk(f"{prefix}.{key}" if prefix else str(key), child, depth + 1)
            return
        if not prefix:
            return
        if isinstance(node, Sequence) and not isinstance(node, str | bytes):  # a list, a Hydra ListConfig
            items = [_scalar(v) for v in list(node)[:MAX_LIST_ITEMS + 1]]
            if len(items) <= MAX_LIST_ITEMS and all(i is not None for i in items):
                out[prefix] = [i for i in items if i is not None]
            return
        scalar = _scalar(node)
        if scalar is not None:
            out[prefix] = scalar

    walk("", config, 0)
    return out
