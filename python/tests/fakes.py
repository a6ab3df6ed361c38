"""What the adapter's tests drive it with: a fake supervisor (the event pipe,
the DBH_* environment, a resolved scenario in a temporary folder), a tiny
model, its batches and small datasets. Importable by name, so that a DataLoader
worker started with spawn can unpickle the datasets."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"

BASE_SCENARIO: dict[str, Any] = {
    "name": "adapter-test",
    "train": {"max_steps": 4, "seed": 0, "accumulation": 1, "precision": "fp32"},
    "data": {"batch_size": 4},
    "monitors": {"mode": "cheap"},
    "hardware": {"device": "cpu"},
    "faults": [],
}


def scenario(**sections: Any) -> dict[str, Any]:
    """BASE_SCENARIO with `sections` merged in (a dict section key by key)."""
    out = copy.deepcopy(BASE_SCENARIO)
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name].update(value)
        else:
            out[name] = value
    return out


class FakeSupervisor:
    """dbh's side of one trial, in the test's process: a pipe whose write end
    is the event descriptor, the environment dbh sets
    (harness/supervisor/worker_contract.cc, worker_env) and the resolved
    scenario as a JSON file. A thread drains the pipe; `events()` closes the
    write end and returns what arrived, parsed."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, **sections: Any) -> None:
        folder.mkdir(parents=True)
        self.trial_dir = folder / "trial"
        self.trial_dir.mkdir()
        self.scenario = scenario(**sections)
        path = folder / "scenario.json"
        path.write_text(json.dumps(self.scenario))
        self.read_fd, self.write_fd = os.pipe()
        self.env = {
            "DBH_WORKER_PROTOCOL": "1",
            "DBH_EVENT_FD": str(self.write_fd),
            "DBH_SCENARIO": str(path),
            "DBH_SCENARIO_HASH": "0123456789abcdef",
            "DBH_TRIAL_DIR": str(self.trial_dir),
            "DBH_TRIAL": "0",
            **(env or {}),
        }
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                return
            self._chunks.append(chunk)

    def connect(self) -> Any:
        import dbh_adapter
        return dbh_adapter.connect(self.env)

    def close(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        self._reader.join(timeout=30)
        if self.read_fd >= 0 and not self._reader.is_alive():
            os.close(self.read_fd)
            self.read_fd = -1

    def raw(self) -> bytes:
        """Everything written, once every writer has closed the pipe."""
        self.close()
        assert not self._reader.is_alive(), "a process still holds the event pipe open"
        return b"".join(self._chunks)

    def events(self) -> list[dict[str, Any]]:
        """The events written, each line parsed (a torn or mixed line fails)."""
        data = self.raw()
        assert data == b"" or data.endswith(b"\n"), data[-200:]
        return [json.loads(line) for line in data.decode().splitlines()]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


class TinyNet(nn.Module):
    """stem (Conv2d) -> body (Conv2d, ReLU) -> head (Linear), on [N, 1, 8, 8]."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.body(self.stem(x)).mean(dim=(2, 3)))
        return out


def batches(count: int = 4, size: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    """`count` batches of `size` 8×8 images with targets and sample ids."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(count):
        out.append({"image": torch.randn(size, 1, 8, 8, generator=g), "target": torch.randn(size, 1, generator=g),
                    "id": [f"s{b * size + i}" for i in range(size)]})
    return out


def train_plain(session: Any, *, steps: int | None = None, lr: float = 0.05, model: nn.Module | None = None,
                data: list[dict[str, Any]] | None = None, scaler: Any = None,
                on_step: Any = None, after_step: Any = None) -> nn.Module:
    """The plain loop of python/README.md on TinyNet, seeded: the adapter's
    watch / steps / backward / optimizer_step; `on_step(step, model,
    optimizer)` before the optimizer's step, `after_step(step)` after it."""
    torch.manual_seed(0)
    model = model or TinyNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with session as dbh:
        dbh.watch(model, optimizer, scaler=scaler)
        for step, batch in dbh.steps(data or batches(), max_steps=steps):
            loss = nn.functional.mse_loss(model(batch["image"]), batch["target"])
            dbh.backward(loss)
            if on_step is not None:
                on_step(step, model, optimizer)
            dbh.optimizer_step(samples=len(batch["id"]))
            if after_step is not None:
                after_step(step)
    return model


class Squares(torch.utils.data.Dataset[torch.Tensor]):
    """Sample i is the tensor [i, i*i]; `bad` indices raise ValueError."""

    def __init__(self, n: int = 8, bad: tuple[int, ...] = ()) -> None:
        self.n = n
        self.bad = bad
        self.label = "squares"

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if index in self.bad:
            raise ValueError(f"cannot decode sample {index}")
        return torch.tensor([float(index), float(index * index)])


def subprocess_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a child Python that imports this checkout's adapter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), str(Path(__file__).resolve().parent)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


PYTHON = sys.executable


def run_forked(target: Any, *args: Any) -> int | None:
    """Runs target(*args) in a forked child (the imports already done); its exit status."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout=60)
    return child.exitcode
