"""The silent-failure checks the adapter makes on any model (capability
`monitors.silent`): predictions collapsed, read from the model's own output,
and a target with nothing to find, read from the batch. dbh judges the rest
from the events (the loss not falling, gradients of exactly 0, a learning
rate of 0: Note [Updates that change nothing]); the input check and the
label checks against annotations are dbh's DBNet's own.

The model's output is the tensor (the first of a tuple, list or dict) its
outermost module called in a training step returns. As probabilities: the
output itself when it lies in [0, 1], else its sigmoid (logits). Collapsed:
after `monitors.collapse_after` steps, the probabilities entirely below
`monitors.collapse_margin` (or above 1 minus it) for `monitors.collapse_steps`
steps in a row, in steps whose batch holds something to find where the
adapter can read the batch's target (the second item of a tuple batch, or a
dict's target, mask, label or labels). One read per step, with the step's end."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ._faults import batch_target, target_entry
from ._monitors import Finding

def _sigmoid(v: float) -> float:
    """The logistic function, without overflow at either end."""
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first floating-point tensor of a module's output."""
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() else None
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for item in value:
            t = first_tensor(item)
            if t is not None:
                return t
    return None


class SilentFinding(Finding):
    """A silent failure the adapter found: the run stays finite but cannot
    learn (`health` of check `check`, error kind `silent`, done `failed`)."""

    def __init__(self, check: str, kind: str, site: str, step: int, message: str, evidence: list[str],
                 detail: dict[str, Any]) -> None:
        super().__init__(kind, site, "", step, message=message, extra=detail)
        self.check = check
        self.evidence = evidence


class PredictionWatch:
    """Hooks on a model's outer modules that keep the training step's output
    (a reference, nothing computed); the step's end judges it, after the
    warm-up only, with one read."""

    def __init__(self, on: bool, collapse_after: int, collapse_steps: int, margin: float) -> None:
        self.on = on
        self.collapse_after, self.collapse_steps, self.margin = collapse_after, max(1, collapse_steps), margin
        self._output: torch.Tensor | None = None
        self._target: torch.Tensor | None = None
        self._run = 0
        self._since = -1
        self._handles: list[Any] = []

    def attach(self, model: torch.nn.Module) -> None:
        """Hooks the model and its direct children: the last of them to
        return in a step is the outermost that ran (a LightningModule whose
        training_step calls self.model)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._run = 0
        self._since = -1
        if not self.on:
            return
        for module in [model, *model.children()]:
            self._handles.append(module.register_forward_hook(self._hook))

    def _hook(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        # A reference only: the step's end reads the last one (the outermost).
        if module.training:
            out = first_tensor(output)
            if out is not None and out.numel() > 0:
                self._output = out.detach()

    def batch(self, batch: Any) -> None:
        """The step's batch: whether it holds something to find."""
        if not self.on:
            return
        target = batch_target(batch)
        self._target = target.detach() if target is not None else None

    def judge(self, step: int) -> None:
        """At the step's end: raises SilentFinding once the predictions stayed
        collapsed for collapse_steps steps."""
        output, target = self._output, self._target
        self._output = self._target = None
        if not self.on or output is None or step < self.collapse_after:
            return
        with torch.no_grad():
            values = torch.stack(torch.aminmax(output.detach())).float().tolist()
        # Probabilities as they are, logits through the sigmoid (monotonic:
        # the extremes' sigmoids are the probabilities' extremes).
        logits = not (values[0] >= 0 and values[1] <= 1)
        p_min, p_max = (_sigmoid(values[0]), _sigmoid(values[1])) if logits else (values[0], values[1])
        collapsed = p_max < self.margin or p_min > 1 - self.margin
        if not collapsed and self._run == 0:
            return  # nothing to count and nothing to reset, whatever the batch holds
        if target is not None and float(target.float().abs().sum()) == 0:
            return  # nothing to find in this batch: neither collapsed nor not
        low, high = p_max < self.margin, p_min > 1 - self.margin
        if not (low or high):
            self._run, self._since = 0, -1
            return
        if self._run == 0:
            self._since = step
        self._run += 1
        if self._run < self.collapse_steps:
            return
        with torch.no_grad():
            x = output.detach().float()
            p_mean = float((torch.sigmoid(x) if logits else x).mean())
        where = f"steps {self._since}-{step}" if self._since != step else f"step {step}"
        side = f"entirely below {self.margin:.3f} (highest {p_max:.4f}" if low else \
            f"entirely above {1 - self.margin:.3f} (lowest {p_min:.4f}"
        message = f"predictions collapsed to {'0' if low else '1'} over {where}"
        evidence = [f"the model's output as probabilities {side}, mean {p_mean:.4f}) for {self._run} consecutive "
                    f"steps, after a warm-up of {self.collapse_after} steps",
                    "the model predicts " + ("nothing anywhere" if low else "everything everywhere") +
                    ("" if target is None else " while the batch's target holds something to find")]
        raise SilentFinding("predictions_collapsed", "prediction", "output", step, message, evidence,
                            {"prob_min": p_min, "prob_max": p_max, "since": self._since, "steps": self._run})


class TargetWatch:
    """`monitors.silent`'s `labels` on any training: a target map that holds
    nothing to find. Note [A target with nothing to find]: the batch's
    target (target_entry) is a map, at least two dimensions per sample, and
    is 0 everywhere, in every sample, in each of the run's first
    `monitors.collapse_steps` steps. The training then learns to predict
    nothing, its loss falls, and nothing else fails: a label transform that
    draws every region as background. Dense targets only: a class index or
    a per-sample flag of 0 in a few batches in a row is ordinary. Read in the
    run's first steps only (one read each), never after."""

    def __init__(self, on: bool, steps: int) -> None:
        self.on = on
        self.steps = max(1, steps)
        self._empty: list[str] = []  # per step from the run's start: the empty map's site
        self._shape: list[int] = []
        self._done = False

    def begin_run(self) -> None:
        """A run's start (each in-process run is judged from its own)."""
        self._empty, self._shape, self._done = [], [], False

    def batch(self, batch: Any) -> None:
        """The step's batch, before anything changes it: whether its target
        map holds anything to find."""
        if not self.on or self._done:
            return
        entry = target_entry(batch)
        if entry is None or entry[1].dim() < 3 or entry[1].numel() == 0:
            self._done = True  # no map to read: nothing to judge in this run
            return
        site, target = entry
        with torch.no_grad():
            empty = not bool(target.detach().ne(0).any())
        if not empty:
            self._done = True  # something to find: the pipeline draws targets
            return
        self._empty.append(site)
        self._shape = list(target.shape)

    def judge(self, step: int) -> None:
        """At the step's end: raises SilentFinding at the last of the run's
        first `steps` steps when every one of them held an empty target map."""
        if self._done or len(self._empty) < self.steps:
            return
        self._done = True
        site, n = self._empty[-1], len(self._empty)
        message = (f"labels without anything to find: the target {site} is 0 everywhere in every batch "
                   f"from the run's first step through step {step}")
        evidence = [f"{site} (shape {self._shape}) holds no non-zero value in any sample of the run's first {n} "
                    f"batches (monitors.collapse_steps {self.steps})",
                    "the model can only learn to predict nothing: the loss falls while nothing is found; a label "
                    "transform that draws every region as background, or annotations the dataset does not read"]
        raise SilentFinding("labels_degenerate", "label", site, step, message, evidence,
                            {"steps": n, "shape": self._shape})
