"""The training's own configuration in `hello` (_config.py): what `dbh scenario
from-command --external` maps dbh's keys into."""

from __future__ import annotations

import math
from typing import Any

import dbh_adapter
from dbh_adapter._config import MAX_KEYS, flatten_config
from fakes import of, train_plain


def test_nested_mappings_become_dotted_keys_with_json_values() -> None:
    cfg = {"optim": {"step_size": 0.05, "clip": 0.0}, "loader": {"per_step": 2}, "run": {"name": "x", "on": True},
           "sizes": [64, 64], "nested": {"deeper": {"leaf": 3}}}
    assert flatten_config(cfg) == {"optim.step_size": 0.05, "optim.clip": 0.0, "loader.per_step": 2, "run.name": "x",
                                   "run.on": True, "sizes": [64, 64], "nested.deeper.leaf": 3}


def test_what_json_cannot_hold_is_left_out_and_the_whole_is_bounded() -> None:
    cfg: dict[str, Any] = {"nan": math.nan, "inf": math.inf, "none": None, "obj": object(), "long": list(range(65)),
                           "mixed": [1, object()], "text": "x" * 5000, "ok": 1}
    flat = flatten_config(cfg)
    assert set(flat) == {"text", "ok"}
    assert flat["text"] == "x" * 1000
    many = {f"k{i}": i for i in range(MAX_KEYS + 10)}
    assert len(flatten_config(many)) == MAX_KEYS


def test_a_hydra_config_is_read_with_its_interpolations_resolved() -> None:
    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"base": 0.1, "optim": {"lr": "${base}"}, "sizes": [32, 32]})
    assert flatten_config(cfg) == {"base": 0.1, "optim.lr": 0.1, "sizes": [32, 32]}


def test_hello_carries_the_config_given_to_connect(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 1})
    dbh = dbh_adapter.connect(sup.env, config={"optim": {"step_size": 0.05}, "loader": {"per_step": 4}})
    train_plain(dbh, steps=1)
    hello = of(sup.events(), "hello")[0]
    assert hello["config"] == {"optim.step_size": 0.05, "loader.per_step": 4}


def test_hello_leaves_config_out_when_none_was_given(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 1})
    train_plain(sup.connect(), steps=1)
    assert "config" not in of(sup.events(), "hello")[0]
