"""data.fixed_batch: the first batch, repeated at every step.

Note [The first batch, repeated]: `dbh diagnose` asks whether the model and
its optimizer can fit one batch (Lightning's `overfit_batches=1`), which
separates "the model or optimizer cannot" from "the data stream breaks it".
The training keeps its own loader and loop: the adapter keeps a copy of the
first batch's tensors and writes it into every later batch's own tensors, in
place, before the step's faults and checks see it, so no maker or code of the
user's is needed. A batch that does not hold the first one's tensors (another
structure, shape or type: a last, smaller batch) cannot be made the first
one: that is said, never trained on as if it were.
"""

from __future__ import annotations

from typing import Any

import torch

from ._monitors import batch_tensors


class FirstBatch:
    """The first batch's tensors and sample ids, kept when data.fixed_batch is on."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._tensors: list[tuple[str, torch.Tensor]] | None = None
        self.ids: list[str] = []

    def apply(self, batch: Any, ids: list[str]) -> str:
        """Keeps the first batch; makes every later one a copy of it, in
        place. Returns why `batch` could not be made the first ("" when done
        or off)."""
        if not self.on:
            return ""
        tensors = batch_tensors(batch, floating=False)
        if self._tensors is None:
            self._tensors = [(site, t.detach().clone()) for site, t in tensors]
            self.ids = list(ids)
            return ""
        want = [(site, tuple(t.shape), t.dtype) for site, t in self._tensors]
        got = [(site, tuple(t.shape), t.dtype) for site, t in tensors]
        if want != got:
            return (f"data.fixed_batch: expected every batch to hold the first batch's tensors {_described(want)}, "
                    f"got {_described(got)}: this batch cannot be made the first (drop the last, smaller batch)")
        with torch.no_grad():
            for (_, first), (_, t) in zip(self._tensors, tensors):
                t.copy_(first)
        return ""


def _described(tensors: list[tuple[str, tuple[int, ...], torch.dtype]]) -> str:
    return ", ".join(f"{site} {list(shape)} {str(dtype).replace('torch.', '')}" for site, shape, dtype in tensors[:4]) + \
        (f" and {len(tensors) - 4} more" if len(tensors) > 4 else "")
