"""monitors.numerics_save_states and monitors.numerics_replay (Note [The same
state, step by step]): the state a step starts from, saved and taken back."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from dbh_adapter._protocol import state_file_name
from dbh_adapter._states import StepStates


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_()  # type: ignore[union-attr]


def _model(seed: int) -> _Net:
    torch.manual_seed(seed)
    return _Net()


def test_a_saved_state_is_taken_back_at_its_step(tmp_path: Path) -> None:
    recorded, other = _model(1), _model(2)
    saver = StepStates(save=True, replay="", trial_dir=str(tmp_path))
    assert saver.at_step(recorded, 3, run=0) == ""
    assert os.path.isfile(tmp_path / "state-s3.pt")
    assert not torch.equal(recorded.conv.weight, other.conv.weight)
    replayer = StepStates(save=False, replay=str(tmp_path), trial_dir="")
    weight = other.conv.weight
    assert replayer.at_step(other, 3, run=0) == ""
    assert torch.equal(other.conv.weight, recorded.conv.weight)
    assert other.conv.weight is weight  # in place: the optimizer keeps its parameters
    assert str(other.bn.running_mean) == str(recorded.bn.running_mean)


def test_a_step_without_a_state_trains_from_its_own(tmp_path: Path) -> None:
    model = _model(2)
    before = model.conv.weight.detach().clone()
    assert StepStates(save=False, replay=str(tmp_path), trial_dir="").at_step(model, 0, run=0) == ""
    assert torch.equal(model.conv.weight, before)


def test_only_run_0_of_rank_0_saves(tmp_path: Path) -> None:
    saver = StepStates(save=True, replay="", trial_dir=str(tmp_path))
    assert saver.at_step(_model(1), 0, run=1) == ""
    assert saver.at_step(_model(1), 1, run=0, rank=1) == ""
    assert os.listdir(tmp_path) == []


def test_a_state_of_another_model_is_named(tmp_path: Path) -> None:
    torch.save({"conv.weight": torch.zeros(1)}, tmp_path / state_file_name(0))
    problem = StepStates(save=False, replay=str(tmp_path), trial_dir="").at_step(_model(1), 0, run=0)
    assert problem.startswith(f"monitors.numerics_replay: {tmp_path / 'state-s0.pt'}: expected a state of this model")


def test_a_state_that_is_a_link_is_never_read(tmp_path: Path) -> None:
    recorded = _model(1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert StepStates(save=True, replay="", trial_dir=str(elsewhere)).at_step(recorded, 0, run=0) == ""
    replay = tmp_path / "replay"
    replay.mkdir()
    os.symlink(elsewhere / "state-s0.pt", replay / "state-s0.pt")
    model = _model(2)
    before = model.conv.weight.detach().clone()
    assert StepStates(save=False, replay=str(replay), trial_dir="").at_step(model, 0, run=0) == ""
    assert torch.equal(model.conv.weight, before)
