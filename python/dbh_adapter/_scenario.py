"""What the resolved scenario asks of this run: its steps, seed, checkpoints,
resume point, sample subset, monitors, memory budget and faults (the keys of
docs/worker-protocol.md, "What a worker honours").
"""

from __future__ import annotations

import os
from typing import Any

from ._protocol import checkpoint_file_name


# The defaults of the `monitors` keys the adapter reads, as dbh's schema
# declares them (docs/scenario-keys.md, generated from it): dbh writes every
# key into the resolved scenario, so these answer only for a scenario written
# by hand. tests/test_contract.py keeps them equal to the schema's.
MONITOR_DEFAULTS: dict[str, Any] = {
    "mode": "cheap",
    "silent": ["input", "labels", "predictions", "learning"],
    "numerics": False,
    "numerics_jitter": 0.0,
    "numerics_save_states": False,
    "collapse_after": 10,
    "collapse_steps": 5,
    "collapse_margin": 0.02,
}


def _section(scenario: dict[str, Any], name: str) -> dict[str, Any]:
    value = scenario.get(name)
    return value if isinstance(value, dict) else {}


def _int(section: dict[str, Any], key: str, default: int) -> int:
    value = section.get(key)
    return int(value) if value not in (None, "") else default


class ScenarioFacts:
    """The resolved scenario of one trial, read as the adapter needs it."""

    def __init__(self, scenario: dict[str, Any], trial_dir: str) -> None:
        self.scenario = scenario
        self.trial_dir = trial_dir
        self.train = _section(scenario, "train")
        self.data = _section(scenario, "data")
        self.monitors = _section(scenario, "monitors")
        self.hardware = _section(scenario, "hardware")

    @property
    def name(self) -> str:
        return str(self.scenario.get("name", ""))

    @property
    def faults(self) -> list[dict[str, Any]]:
        """The `faults` list, each a dict of `name`, schedule and parameters."""
        value = self.scenario.get("faults")
        return [f for f in value if isinstance(f, dict)] if isinstance(value, list) else []

    @property
    def max_steps(self) -> int:
        """train.max_steps: the schedule's length (the LR schedule's too)."""
        return _int(self.train, "max_steps", 0)

    @property
    def last_step(self) -> int:
        """Steps this run trains: train.stop_after, else train.max_steps."""
        stop = _int(self.train, "stop_after", 0)
        return stop if stop > 0 else self.max_steps

    @property
    def in_process(self) -> int:
        """repeat.in_process: runs of the training in this one process."""
        return max(1, _int(_section(self.scenario, "repeat"), "in_process", 1))

    @property
    def seed(self) -> int:
        return _int(self.train, "seed", 0)

    @property
    def accumulation(self) -> int:
        return _int(self.train, "accumulation", 1)

    @property
    def precision(self) -> str:
        """train.precision as dbh spells it: fp32, fp16 or bf16."""
        return str(self.train.get("precision") or "fp32")

    @property
    def batch_size(self) -> int:
        return _int(self.data, "batch_size", 0)

    @property
    def resume_from(self) -> str | None:
        """train.resume_from: the checkpoint to continue from, or None."""
        value = self.train.get("resume_from")
        return str(value) if value else None

    @property
    def data_source(self) -> str:
        """data.source: `real`, or one of dbh's synthetic sources (the
        training's own synthetic samples stand for every one of them)."""
        return str(self.data.get("source") or "real")

    @property
    def subset(self) -> list[int]:
        """data.subset: the indices of the user's dataset to train on (in the
        order its __getitem__ takes them); [] for the whole dataset."""
        return [int(i) for i in self.data.get("subset") or []]

    @property
    def fixed_batch(self) -> bool:
        """data.fixed_batch: train on the first batch at every step."""
        return bool(self.data.get("fixed_batch", False))

    @property
    def monitor_mode(self) -> str:
        """monitors.mode: cheap (the default), localise or off."""
        return str(self.monitors.get("mode", MONITOR_DEFAULTS["mode"]))

    def silent_check(self, check: str) -> bool:
        """Whether monitors.silent has `check` on (and the monitors are)."""
        every: list[str] = MONITOR_DEFAULTS["silent"]
        checks = self.monitors.get("silent", every)
        if isinstance(checks, bool):
            checks = every if checks else []
        return self.monitor_mode != "off" and check in (checks or [])

    @property
    def numerics(self) -> bool:
        """monitors.numerics: every module's numbers in `step_end`."""
        return self.monitors.get("numerics") is True

    @property
    def numerics_jitter(self) -> float:
        """monitors.numerics_jitter: the scale of what a trial adds to its
        modules' outputs (0: off, the default)."""
        return self.monitor_number("numerics_jitter")

    @property
    def numerics_save_states(self) -> bool:
        """monitors.numerics_save_states: save the state every step starts from."""
        return self.monitors.get("numerics_save_states") is True

    @property
    def numerics_replay(self) -> str:
        """monitors.numerics_replay: the folder of states every step starts from ("" none)."""
        value = self.monitors.get("numerics_replay")
        return value if isinstance(value, str) else ""

    def monitor_number(self, key: str) -> float:
        """monitors.<key> as a number (collapse_after, collapse_steps,
        collapse_margin, numerics_jitter), MONITOR_DEFAULTS' when unset."""
        default = float(MONITOR_DEFAULTS[key])
        value = self.monitors.get(key, default)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    @property
    def train_mode(self) -> str:
        """train.mode: `train`, or `ops` (basic tensor operations only: the
        diagnosis ladder's first rung)."""
        return str(self.train.get("mode") or "train")

    @property
    def device(self) -> str:
        return str(self.hardware.get("device") or "cpu")

    @property
    def memory_budget(self) -> int:
        """hardware.memory_budget in bytes; 0 for none."""
        return _int(self.hardware, "memory_budget", 0)

    # --- checkpoints ----------------------------------------------------------

    @property
    def checkpoint_every(self) -> int:
        return _int(self.train, "checkpoint_every", 0)

    def checkpoint_due(self, next_step: int) -> bool:
        """Whether train.checkpoint_every asks for a checkpoint to resume at
        `next_step` (none at the run's end: nothing resumes there)."""
        every = self.checkpoint_every
        return every > 0 and next_step % every == 0 and next_step < self.last_step

    def checkpoint_path(self, next_step: int) -> str:
        """Where the checkpoint to resume at `next_step` goes: the trial folder,
        named as dbh's bisections look for it."""
        return os.path.join(self.trial_dir, checkpoint_file_name(0, next_step))
