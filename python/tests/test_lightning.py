"""The Lightning callback (lightning.py): a Trainer fit of a tiny
LightningModule on the CPU, under a fake supervisor."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

pytest.importorskip("lightning")
import lightning as L  # noqa: E402

from dbh_adapter import Finding, KeyNotApplied, NotSupported  # noqa: E402
from dbh_adapter.lightning import DbhCallback  # noqa: E402
from fakes import TinyNet, of, types  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated:FutureWarning"),  # Lightning 2.6 on torch 2.11
    pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended"),
]


class Images(Dataset[dict[str, Any]]):
    """16 samples: an 8×8 image, a target and an id."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.images = torch.randn(16, 1, 8, 8, generator=g)
        self.targets = torch.randn(16, 1, generator=g)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.images[i], "target": self.targets[i], "id": f"img_{i:02d}"}


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = TinyNet()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch["image"]), batch["target"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def fit(dbh: Any, root: Any, max_steps: int = 3, batch_size: int = 4) -> Module:
    torch.manual_seed(0)
    module = Module()
    loader = DataLoader(dbh.dataset(Images()), batch_size=batch_size, shuffle=False)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        default_root_dir=str(root), callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(module, train_dataloaders=loader, ckpt_path=dbh.resume_path())
    return module


def test_a_lightning_fit_writes_the_protocols_events(supervisor: Any, tmp_path: Any,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    sup = supervisor(train={"max_steps": 3})
    fit(sup.connect(), tmp_path)
    events = sup.events()
    main = [t for t in types(events) if t != "sample_read"]
    assert main == ["hello", "dataset", "run_begin"] + ["step_begin", "batch", "step_end"] * 3 + ["run_end", "done"]
    hello = events[0]
    assert " (lightning " in hello["worker"] and "net.body.0" in hello["modules"]
    assert hello["environment"]["lightning"] == L.__version__
    assert [e["step"] for e in of(events, "step_end")] == [0, 1, 2]
    assert of(events, "batch")[0]["samples"] == ["img_00", "img_01", "img_02", "img_03"]
    assert sorted(e["index"] for e in of(events, "sample_read"))[:12] == list(range(12))  # and any read ahead
    for end in of(events, "step_end"):
        assert end["samples"] == 4 and end["lr"] == 0.05 and end["grad_norm"] > 0
        assert not {"bce", "l1", "dice"} & set(end)
    assert events[-1]["status"] == "passed" and of(events, "run_end")[0]["steps"] == 3
    assert capfd.readouterr().out == ""  # nothing of the adapter on the user's stdout


def test_a_key_that_did_not_reach_the_trainer_raises_key_not_applied(supervisor: Any, tmp_path: Any) -> None:
    sup = supervisor(train={"max_steps": 3})
    with pytest.raises(KeyNotApplied) as caught:
        fit(sup.connect(), tmp_path, max_steps=5)
    assert caught.value.key == "train.max_steps" and not isinstance(caught.value, SystemExit)
    events = sup.events()
    assert types(events) == ["hello", "dataset", "run_begin", "error", "done"]  # one error: on_exception adds none
    assert events[3]["kind"] == "harness" and "trainer.max_steps = 5" in events[3]["message"]
    assert events[4]["status"] == "error"


def test_the_batch_size_is_checked_too(supervisor: Any, tmp_path: Any) -> None:
    sup = supervisor(train={"max_steps": 3})
    with pytest.raises(KeyNotApplied, match="data.batch_size is 4 in the scenario .* batch_size = 2"):
        fit(sup.connect(), tmp_path, batch_size=2)


def test_a_nan_in_a_module_diverges_the_fit_at_its_step(supervisor: Any, tmp_path: Any) -> None:
    sup = supervisor(train={"max_steps": 3}, faults=[{"name": "nan_activation", "module": "net.body", "at_step": 1}])
    with pytest.raises(Finding):
        fit(sup.connect(), tmp_path)
    events = sup.events()
    error = of(events, "error")[0]
    assert (error["kind"], error["step"], error["module"]) == ("diverged", 1, "net.body")
    assert events[-1]["status"] == "diverged" and len(of(events, "error")) == 1


def test_checkpoints_go_into_the_trial_folder_and_a_run_resumes_from_them(supervisor: Any, tmp_path: Any) -> None:
    first = supervisor(train={"max_steps": 4, "checkpoint_every": 2})
    fit(first.connect(), tmp_path / "a", max_steps=4)
    checkpoints = of(first.events(), "checkpoint")
    path = os.path.join(first.trial_dir, "checkpoint-r0-s2.pt")
    assert checkpoints == [{**checkpoints[0], "run": 0, "step": 2, "path": path}] and os.path.isfile(path)

    second = supervisor(train={"max_steps": 4, "resume_from": path})
    fit(second.connect(), tmp_path / "b", max_steps=4)
    events = second.events()
    resumed = of(events, "checkpoint")[0]
    assert resumed["resumed"] is True and resumed["step"] == 2 and resumed["path"] == path
    assert [e["step"] for e in of(events, "step_begin")] == [2, 3]


def test_a_fit_on_several_ranks_is_refused_by_name(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    callback = dbh.lightning_callbacks()[0]
    assert isinstance(callback, DbhCallback)
    with pytest.raises(NotSupported, match="a launch of 2 ranks"):
        callback.setup(SimpleNamespace(global_rank=0, world_size=2), Module(), "fit")  # type: ignore[arg-type]
    events = sup.events()
    assert types(events) == ["error", "done"] and events[0]["kind"] == "harness"
    # The ranks it launched say so too, and write nothing.
    other = supervisor()
    callback = other.connect().lightning_callbacks()[0]
    with pytest.raises(NotSupported, match=r"this is rank 1"):
        callback.setup(SimpleNamespace(global_rank=1, world_size=2), Module(), "fit")
    assert other.raw() == b""


class Validated(Module):
    """Module with a validation step that logs its own metrics (and a sanity check before training)."""

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        err = torch.nn.functional.mse_loss(self.net(batch["image"]), batch["target"])
        self.log("val/f1", 0.0)
        self.log("val_loss", err)


def test_the_modules_validation_metrics_arrive_as_eval_events(supervisor: Any, tmp_path: Any) -> None:
    sup = supervisor(train={"max_steps": 4})
    dbh = sup.connect()
    torch.manual_seed(0)
    loader = DataLoader(dbh.dataset(Images()), batch_size=4, shuffle=False)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=1,
                        val_check_interval=2, default_root_dir=str(tmp_path), callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(Validated(), train_dataloaders=loader, val_dataloaders=DataLoader(Images(), batch_size=8))
    evals = of(sup.events(), "eval")
    assert [e["step"] for e in evals] == [2, 4]  # the sanity check's validation is not one
    assert evals[0]["hmean"] == 0.0 and set(evals[0]["metrics"]) == {"val/f1", "val_loss"}
