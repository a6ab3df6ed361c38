"""The finite checks with module attribution, on any torch.nn.Module.

Cheap mode (monitors.mode cheap) collects one float32 sum per module output
(non-finite exactly when a value is, or when the sum leaves float32's range),
the loss and each parameter's gradient norm without synchronising, and reads
them all once per optimizer step; the first non-finite one in the order the
step computed them (the batch's input and labels, forward outputs, loss,
gradients in the order autograd accumulated them) is the finding. The same read carries the step's
total gradient norm. Localise mode reads each forward flag as it is made and
adds the tensor's statistics and the module that ran before it.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors in `value` (a tensor or nested containers)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


# How deep and how many of a batch's tensors the finite check reads: a batch
# is a few tensors in a dict or tuple, and a stranger one is not walked
# further (the check costs one sum per tensor, every step).
_BATCH_DEPTH = 4
_BATCH_TENSORS = 32


def batch_tensors(batch: Any, floating: bool = True) -> list[tuple[str, torch.Tensor]]:
    """The batch's floating-point tensors (every tensor when not `floating`)
    with where they are (`batch['mask']`, `batch[1]`), whatever its
    structure: a tensor, dicts, tuples and lists nested up to _BATCH_DEPTH,
    at most _BATCH_TENSORS."""
    out: list[tuple[str, torch.Tensor]] = []

    def walk(value: Any, site: str, depth: int) -> None:
        if len(out) >= _BATCH_TENSORS or depth > _BATCH_DEPTH:
            return
        if isinstance(value, torch.Tensor):
            if not floating or value.is_floating_point() or value.is_complex():
                out.append((site, value))
        elif isinstance(value, Mapping):
            for key, v in value.items():
                walk(v, f"{site}[{key!r}]", depth + 1)
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                walk(v, f"{site}[{i}]", depth + 1)

    walk(batch, "batch", 0)
    return out


def _all_finite(value: Any) -> torch.Tensor | None:
    flags = [torch.isfinite(t).all() for t in _tensors(value)]
    if not flags:
        return None
    return flags[0] if len(flags) == 1 else torch.stack(flags).all()


def _total(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One float32 sum over `tensors`: non-finite when any value is (or when
    the sum leaves float32's range, which only values near its limit do). One
    pass and no temporary of the tensor's size: the cheap check."""
    sums = [t.detach().sum(dtype=torch.float32) for t in tensors]
    return sums[0] if len(sums) == 1 else torch.stack(sums).sum()


def stats(value: Any) -> dict[str, float | int] | None:
    """min, max, mean over the finite values and the NaN/Inf counts."""
    ts = list(_tensors(value))
    if not ts:
        return None
    t = ts[0].detach().float()
    finite = t[torch.isfinite(t)]
    out: dict[str, float | int] = {"numel": t.numel(), "nan": int(torch.isnan(t).sum()),
                                   "inf": int(torch.isinf(t).sum())}
    if finite.numel():
        out.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()))
    return out


# Modules whose output is finite whenever their input is.
_FINITE_PRESERVING = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.LeakyReLU, torch.nn.ELU, torch.nn.GELU, torch.nn.SiLU,
                      torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Hardtanh, torch.nn.Hardswish, torch.nn.Hardsigmoid,
                      torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d, torch.nn.AdaptiveMaxPool2d,
                      torch.nn.Dropout, torch.nn.Dropout2d, torch.nn.Identity, torch.nn.Upsample, torch.nn.Flatten)


class Finding(Exception):
    """A non-finite value the monitors found: stops the step.

    `kind` is input, activation, loss or gradient; `site` names the tensor
    (`decoder.fusion output`, `head.weight.grad`), `module` the module that
    made it ("" for the input and the loss), `step` the optimizer step.
    """

    def __init__(self, kind: str, site: str, module: str, step: int, stats_: dict[str, float | int] | None = None,
                 input_module: str | None = None, input_stats: dict[str, float | int] | None = None,
                 sites: dict[str, int] | None = None, message: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message or f"non-finite {kind} ({site}) at step {step}")
        self.kind, self.site, self.module, self.step = kind, site, module, step
        self.stats, self.input_module, self.input_stats = stats_, input_module, input_stats
        self.sites = sites  # non-finite sites per kind, consequences included
        self.extra: dict[str, Any] = extra or {}  # check-specific fields of its health event


@dataclass
class StepReading:
    """What one read of a step's flags gives: the first non-finite site (or
    None) and the total gradient norm (None when no gradient was checked)."""

    finding: Finding | None
    grad_norm: float | None


# (kind, site, module, flag): a flag is a 0-d tensor, non-finite exactly when the site is.
_Flag = tuple[str, str, str, torch.Tensor]


class FiniteMonitor:
    """The finite checks of one model (monitors.mode: cheap, localise or off)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.step = -1
        self._flags: list[_Flag] = []  # in the order the step made them (input, outputs, loss)
        # The gradients' flags, in the order autograd made them: their names,
        # and their norms as one float32 tensor (one op for all of them).
        self._grad_names: list[str] = []
        self._grad_norms: torch.Tensor | None = None
        self._grad_order: list[tuple[str, torch.Tensor]] = []
        self._params: list[tuple[str, torch.nn.Parameter]] = []  # the model's, named, as attached
        self._hooked = 0  # parameters whose gradient hook tells autograd's order
        self._unhooked: list[tuple[str, torch.Tensor]] = []  # the others, in the model's order
        self._grad_norm: torch.Tensor | None = None  # the step's total gradient norm, on the device
        self._last_output: tuple[str, Any] | None = None  # (module name, output) of the last module that ran (localise)
        # Outputs already checked this step (cheap): a container returning its
        # children's outputs (an encoder's feature maps, a head's dict) is not
        # summed again. By id, each entry with a weak reference that tells a
        # tensor from a later one at the same id, and keeps nothing alive.
        self._checked: dict[int, weakref.ref[torch.Tensor]] = {}
        self.last_module = ""

    @property
    def on(self) -> bool:
        return self.mode in ("cheap", "localise")

    def attach(self, model: torch.nn.Module, always: Iterable[str] = ()) -> None:
        """Hooks on `model`. Localise mode checks every module. Cheap mode
        checks the model's blocks: the modules two levels below its first
        level with more than one child (`decoder.fusion`, `encoder.layer1`;
        `model.decoder.fusion` when the net is wrapped in one attribute),
        leaving out those that cannot turn finite inputs into non-finite
        outputs (activations, pooling, dropout, resampling), plus every module
        a fault names (`always`). A finding there names the block; `bisect
        modules` replays the step in localise mode for the exact module."""
        if not self.on:
            return
        always = set(always)
        top = 0
        node = model
        while len(list(node.children())) == 1:
            node = next(node.children())
            top += 1
        for name, module in model.named_modules():
            if not name:
                continue
            if self.mode == "cheap" and name not in always:
                if name.count(".") + 1 > top + 2 or isinstance(module, _FINITE_PRESERVING):
                    continue
            module.register_forward_hook(self._forward_hook(name))
        self._params = list(model.named_parameters())
        for pname, p in self._params:
            if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                p.register_post_accumulate_grad_hook(self._grad_hook(pname))  # type: ignore[no-untyped-call]  # torch
                self._hooked += 1
            else:
                self._unhooked.append((pname, p))

    def begin_step(self, step: int) -> None:
        self.step = step
        self._flags.clear()
        self._grad_names = []
        self._grad_norms = None
        self._grad_order.clear()
        self._grad_norm = None
        self._last_output = None
        self._checked.clear()

    def _forward_hook(self, name: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled():
                return
            self.last_module = name
            if self.mode == "localise":
                flag = _all_finite(output)
                if flag is None:
                    return
                if not bool(flag):
                    before = self._last_output
                    raise Finding("activation", name + " output", name, self.step, stats(output),
                                  before[0] if before else None, stats(before[1]) if before else None)
                self._last_output = (name, output)
                return
            tensors = [t for t in _tensors(output) if not self._seen(t)]
            if not tensors:
                return
            self._flags.append(("activation", name + " output", name, _total(tensors)))
        return hook

    def _seen(self, t: torch.Tensor) -> bool:
        """Whether `t` was checked this step; marks it checked."""
        ref = self._checked.get(id(t))
        if ref is not None and ref() is t:
            return True
        self._checked[id(t)] = weakref.ref(t)
        return False

    def _grad_hook(self, pname: str) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            self._grad_order.append((pname, p))
        return hook

    def check_batch(self, batch: Any, image: torch.Tensor | None) -> None:
        """The batch's own tensors, before the forward pass: `image` (the
        model's input) as the input, every other floating-point tensor of the
        batch (its target, masks, weights) as a label, so that a non-finite
        value that came with the data is named as the data, not as the loss
        it makes non-finite one step later in the order."""
        if not self.on:
            return
        parts: list[tuple[str, str, torch.Tensor]] = [] if image is None else [("input", "batch input", image)]
        parts += [("label", site, t) for site, t in batch_tensors(batch) if t is not image]
        for kind, site, t in parts:
            if self.mode == "localise" and not bool(torch.isfinite(t).all()):
                raise Finding(kind, site, "", self.step, stats(t))
            self._flags.append((kind, site, "", _total([t])))

    def check_loss(self, loss: torch.Tensor) -> None:
        if not self.on:
            return
        if self.mode == "localise" and not bool(torch.isfinite(loss.detach()).all()):
            raise Finding("loss", "loss", "", self.step, stats(loss))
        self._flags.append(("loss", "loss", "", _total([loss])))

    def check_gradients(self, model: torch.nn.Module) -> None:
        """After the step's backward (and accumulation): gradients in the order
        autograd produced them, parameters without a hook after them. One fused
        norm per gradient (non-finite exactly when a value is, or on overflow)
        is its flag, and their root sum of squares the step's total norm, both
        read with the other flags."""
        if not self.on:
            return
        if self._params and len(self._grad_order) == self._hooked:  # every hook ran: autograd's order
            order = self._grad_order + self._unhooked
        else:
            seen = {name for name, _ in self._grad_order}
            order = self._grad_order + [(n, p) for n, p in self._params or model.named_parameters() if n not in seen]
        grads = [(n, p.grad) for n, p in order if p.grad is not None]
        if not grads:
            return
        with torch.no_grad():
            norms = list(torch._foreach_norm([g for _, g in grads]))
            if any(n.dtype != torch.float32 for n in norms):
                norms = [n.float() for n in norms]
            self._grad_names = [n for n, _ in grads]
            self._grad_norms = torch.stack(norms)
            self._grad_norm = torch.linalg.vector_norm(self._grad_norms)

    def read(self) -> StepReading:
        """Reads the step's flags and gradient norm at once (one copy to the
        host): the first non-finite site, or None, and the total norm."""
        parts = []
        if self._flags:
            parts.append(torch.stack([f[3] for f in self._flags]).float())
        if self._grad_norms is not None and self._grad_norm is not None:
            parts += [self._grad_norms, self._grad_norm.reshape(1)]
        if not parts:
            return StepReading(None, None)
        host: list[float] = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
        grad_norm = host.pop() if self._grad_norms is not None else None
        i = next((i for i, v in enumerate(host) if not math.isfinite(v)), None)
        if i is None:
            return StepReading(None, grad_norm)
        if i < len(self._flags):
            kind, site, module, _ = self._flags[i]
            return StepReading(Finding(kind, site, module, self.step), grad_norm)
        pname = self._grad_names[i - len(self._flags)]
        return StepReading(Finding("gradient", pname + ".grad", pname.rpartition(".")[0], self.step), grad_norm)

    def first_finding(self) -> Finding | None:
        """The step's first non-finite site, or None (one read, as `read`)."""
        return self.read().finding

    def sites(self) -> dict[str, int]:
        """Non-finite sites per kind, consequences included (after a finding)."""
        out: dict[str, int] = {}
        for kind, _, _, flag in self._flags:
            if not bool(torch.isfinite(flag).all()):
                out[kind] = out.get(kind, 0) + 1
        if self._grad_norms is not None:
            bad = int((~torch.isfinite(self._grad_norms)).sum())
            if bad:
                out["gradient"] = out.get("gradient", 0) + bad
        return out
