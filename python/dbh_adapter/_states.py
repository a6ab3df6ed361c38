"""monitors.numerics_save_states and monitors.numerics_replay: the state every
step starts from, saved and replayed.

Note [The same state, step by step] (harness/numerics/reference.h): a training
is chaotic, so two machines' trajectories part by more than a small change in
how one of them computes. A numerics reference therefore keeps the model's
state at the start of every step of its first process, and the processes that
compare with it start every step from that state: a step's numbers are then
compared from the same parameters. The state is the model's `state_dict()`
(parameters and buffers), saved with torch as `state-s<k>.pt` in the trial's
folder and loaded in place, before the step's batch is seen.
"""

from __future__ import annotations

import os

import torch

from ._protocol import state_file_name


class StepStates:
    """What monitors.numerics_save_states and monitors.numerics_replay ask at
    the start of each step."""

    def __init__(self, save: bool, replay: str, trial_dir: str) -> None:
        self.save = save and bool(trial_dir)
        self.replay = replay
        self.trial_dir = trial_dir

    @property
    def on(self) -> bool:
        return self.save or bool(self.replay)

    def at_step(self, model: torch.nn.Module, step: int, run: int, rank: int = 0) -> str:
        """Saves the state step `step` starts from (run 0, rank 0) and takes
        the replayed one when its folder has it. Returns what went wrong (""
        when nothing did), naming the key and the file."""
        name = state_file_name(step)
        if self.save and run == 0 and rank == 0:
            path = os.path.join(self.trial_dir, name)
            tmp = path + ".tmp"
            try:
                torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
                os.replace(tmp, path)
            except OSError as exc:
                return f"monitors.numerics_save_states: {path}: expected a writable file, got an error ({exc})"
        if self.replay:
            path = os.path.join(self.replay, name)
            if os.path.isfile(path) and not os.path.islink(path):  # a file of the folder, never a link
                try:
                    state = torch.load(path, map_location="cpu", weights_only=True)
                    model.load_state_dict(state)
                except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
                    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
                    return (f"monitors.numerics_replay: {path}: expected a state of this model saved by "
                            f"monitors.numerics_save_states, got one it cannot take ({first})")
        return ""
