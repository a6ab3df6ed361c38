"""data.fixed_batch (_fixed.py): the first batch, repeated at every step, in
the training's own loop and tensors (Note [The first batch, repeated])."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fakes import batches, of, train_plain


def test_every_step_trains_on_a_copy_of_the_first_batch(supervisor: Any) -> None:
    sup = supervisor(data={"fixed_batch": True}, train={"max_steps": 4})
    data = batches(4)
    first = {k: v.clone() for k, v in data[0].items() if isinstance(v, torch.Tensor)}
    train_plain(sup.connect(), steps=4, data=data)
    for b in data[1:]:  # the loader's own tensors now hold the first batch
        assert torch.equal(b["image"], first["image"]) and torch.equal(b["target"], first["target"])
    events = sup.events()
    assert [e["samples"] for e in of(events, "batch")] == [data[0]["id"]] * 4
    assert "fixed_batch" in of(events, "hello")[0]["capabilities"]
    assert events[-1]["status"] == "passed"


def test_off_the_batches_are_the_loaders(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 2})
    data = batches(2)
    second = data[1]["image"].clone()
    train_plain(sup.connect(), steps=2, data=data)
    assert torch.equal(data[1]["image"], second)


def test_a_batch_that_cannot_be_the_first_is_said_not_trained(supervisor: Any) -> None:
    sup = supervisor(data={"fixed_batch": True}, train={"max_steps": 2})
    data = [batches(1, size=4)[0], batches(1, size=3)[0]]  # a last, smaller batch
    with pytest.raises(RuntimeError, match=r"data.fixed_batch: expected every batch to hold the first batch's "
                                           r"tensors batch\['image'\] \[4, 1, 8, 8\] float32"):
        train_plain(sup.connect(), steps=2, data=data)
    events = sup.events()
    assert of(events, "error")[0]["kind"] == "harness" and len(of(events, "step_end")) == 1
