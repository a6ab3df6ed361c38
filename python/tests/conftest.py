"""pytest set-up for the adapter's tests: the package from this checkout, one
intra-op thread, and the `supervisor` fixture (a fake dbh: fakes.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.dont_write_bytecode = True
# The adapter of this checkout, before any installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from fakes import FakeSupervisor  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Callable[..., FakeSupervisor]]:
    """Makes fake supervisors: `supervisor(train={...}, faults=[...], env={...})`;
    each one's pipe is closed at the end of the test."""
    made: list[FakeSupervisor] = []

    def make(**sections: Any) -> FakeSupervisor:
        s = FakeSupervisor(tmp_path / f"sup{len(made)}", **sections)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
