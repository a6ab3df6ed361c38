"""dbh's faults on any torch.nn.Module, by module name and step.

Each fault of the resolved scenario's `faults` list is one entry here with
the hooks it acts through; its parameters, schedule and meaning are dbh's
(`dbh list faults`). A fault this adapter cannot apply is not listed in the
capabilities, and dbh refuses a scenario that needs it before anything runs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch


class Emit(Protocol):
    """Writes one event (EventWriter.emit)."""

    def __call__(self, type_: str, **fields: Any) -> None: ...


def _float(params: dict[str, Any], key: str, default: float) -> float:
    value = params.get(key, default)
    return float(value) if value not in (None, "") else float(default)


def _int(params: dict[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    return int(value) if value not in (None, "") else int(default)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_bytes(value: Any) -> int:
    """A size as dbh writes one: a whole number of bytes, or `96MiB`, `1GiB`,
    `500MB` (the resolved scenario keeps a fault parameter's text)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    number = text.rstrip("kKmMgGiIbB")
    unit = text[len(number):].strip().upper()
    try:
        if unit not in _UNITS:
            raise ValueError(unit)
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"expected a size such as 64MiB, got {text!r}") from None


# Note [A leak on purpose]: what the `leak` fault retains, for the life of
# the process: a tensor per run, its pages written so that it counts in the
# resident size (on a CUDA model, in the allocator's memory).
_RETAINED: list[torch.Tensor] = []


class Fault:
    """One scheduled fault: name, index in the scenario, schedule, parameters."""

    def __init__(self, index: int, spec: dict[str, Any]) -> None:
        self.index = index
        self.name = str(spec["name"])
        self.at_step = int(spec.get("at_step", 0))
        self.until_step = int(spec.get("until_step", self.at_step))
        self.run = int(spec.get("run", -1))
        self.params: dict[str, Any] = {k: v for k, v in spec.items() if k not in ("name", "at_step", "until_step", "run")}

    def fires_at(self, step: int, run: int = 0) -> bool:
        return self.at_step <= step <= self.until_step and (self.run < 0 or self.run == run)


def input_tensor(batch: Any) -> torch.Tensor | None:
    """The batch's image tensor: `image` (or `images`, `img`, `x`) of a dict,
    else the first tensor of a tuple or list, else the batch itself."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        for key in ("image", "images", "img", "x", "input", "inputs"):
            value = batch.get(key)
            if isinstance(value, torch.Tensor):
                return value
        for value in batch.values():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value
    if isinstance(batch, (tuple, list)):
        for value in batch:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value
    return None


# A dict batch's target: the first of these entries that is a tensor. A
# training mask (`mask`) comes after the map it masks (`gt`, `label`): in a
# dict with both, the map is the target; alone, the mask is.
_TARGET_KEYS = ("target", "targets", "label", "labels", "gt", "region", "mask", "masks")


def target_entry(batch: Any) -> tuple[str, torch.Tensor] | None:
    """The batch's target where the adapter can read it, with where it is
    (`batch['gt']`, `batch[1]`): a tuple's second item, or a dict's target,
    label, gt, region or mask entry (a tensor)."""
    if isinstance(batch, Mapping):
        for key in _TARGET_KEYS:
            value = batch.get(key)
            if isinstance(value, torch.Tensor):
                return f"batch[{key!r}]", value
        return None
    if isinstance(batch, (tuple, list)) and len(batch) >= 2 and isinstance(batch[1], torch.Tensor):
        return "batch[1]", batch[1]
    return None


def batch_target(batch: Any) -> torch.Tensor | None:
    """The batch's target (target_entry's tensor), or None."""
    entry = target_entry(batch)
    return entry[1] if entry is not None else None


def _set_pixels(tensor: torch.Tensor, sample: int, count: int, value: float) -> None:
    """`count` values of sample `sample` set to `value`, spread over it."""
    with torch.no_grad():
        flat = tensor[min(sample, tensor.shape[0] - 1)].reshape(-1)
        n = flat.numel()
        idx = torch.linspace(0, n - 1, steps=max(1, min(count, n)), device=flat.device).long()
        flat[idx] = value


class FaultSet:
    """The scenario's faults acting on one model through its hooks."""

    # The faults this adapter applies (its `fault:<name>` capabilities).
    SUPPORTED = ("nan_activation", "perturb_activation", "nan_gradient", "nan_input", "inf_input", "nan_label",
                 "lr_spike", "lr_freeze", "crash", "hang", "slow_data", "leak")

    def __init__(self, specs: list[dict[str, Any]] | None, emit: Emit) -> None:
        self.faults = [Fault(i, spec) for i, spec in enumerate(specs or [])]
        self._emit = emit
        self._step = -1
        self._run = 0
        self._saved_lrs: list[float] | None = None
        self._fired: set[tuple[int, int, int]] = set()  # (fault index, run, step): fault_fired once per step
        self._device = torch.device("cpu")  # the model's (where `leak` retains its memory)

    def _fired_now(self, fault: Fault, module: str | None = None, detail: dict[str, Any] | None = None) -> None:
        key = (fault.index, self._run, self._step)
        if key in self._fired:
            return
        self._fired.add(key)
        self._emit("fault_fired", fault=fault.name, index=fault.index, run=self._run, step=self._step,
                   module=module, detail=detail)

    def modules(self) -> set[str]:
        """The modules faults name."""
        return {str(f.params.get("module", "")) for f in self.faults} - {""}

    def active(self, name: str) -> list[Fault]:
        return [f for f in self.faults if f.name == name and f.fires_at(self._step, self._run)]

    # --- the hooks of a step -------------------------------------------------

    def set_run(self, run: int) -> None:
        """The in-process run that begins (repeat.in_process)."""
        self._run = run

    def attach(self, model: torch.nn.Module) -> None:
        """Forward hooks on the modules faults name."""
        first = next(iter(model.parameters()), None)
        if first is not None:
            self._device = first.device
        modules = dict(model.named_modules())
        for fault in self.faults:
            if fault.name not in ("nan_activation", "perturb_activation"):
                continue
            name = str(fault.params.get("module", ""))
            if name not in modules:
                raise ValueError(f"faults.{fault.index}.module: expected a module of the model, got {name!r}")
            modules[name].register_forward_hook(self._activation_hook(fault, name))

    def _activation_hook(self, fault: Fault, name: str) -> Callable[[torch.nn.Module, Any, Any], Any]:
        relative = _float(fault.params, "relative", 0.01)

        def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
            if not fault.fires_at(self._step, self._run) or not torch.is_grad_enabled():
                return None
            if fault.name == "perturb_activation":
                # As another kernel or instruction set rounding differently:
                # every value moved by `relative`, the run stays finite.
                self._fired_now(fault, module=name, detail={"relative": relative})
                return _map_floats(output, lambda t: t * (1.0 + relative))
            self._fired_now(fault, module=name)
            return _map_floats(output, lambda t: torch.full_like(t, float("nan")))
        return hook

    def on_step_begin(self, step: int, batch: Any, run: int = 0) -> None:
        self._step, self._run = step, run
        for fault in self.active("crash"):
            self._fired_now(fault)
            sig = getattr(signal, str(fault.params.get("signal", "SIGSEGV")))
            os.kill(os.getpid(), sig)
        for fault in self.active("hang"):
            self._fired_now(fault)
            while True:
                time.sleep(3600)
        for fault in self.active("slow_data"):
            self._fired_now(fault)
            time.sleep(_float(fault.params, "seconds", 1))
        for fault in self.active("leak"):
            if (fault.index, self._run, self._step) in self._fired:
                continue
            size = parse_bytes(fault.params.get("bytes", "64MiB"))
            _RETAINED.append(torch.ones(size, dtype=torch.uint8, device=self._device))
            self._fired_now(fault, detail={"bytes": size, "device": str(self._device)})
        for name, value in (("nan_input", float("nan")), ("inf_input", float("inf"))):
            for fault in self.active(name):
                tensor = input_tensor(batch)
                if tensor is None:
                    raise ValueError(f"faults.{fault.index}: {name}: expected a batch holding an image tensor "
                                     f"(a dict with 'image', or a tuple starting with it), got {type(batch).__name__}")
                _set_pixels(tensor, _int(fault.params, "sample", 0), _int(fault.params, "count", 16), value)
                self._fired_now(fault)
        for fault in self.active("nan_label"):
            # The batch's own target: the entry `map` names in a dict batch,
            # else a tuple's second item or a dict's target, mask, label….
            wanted = str(fault.params.get("map", ""))
            target = batch.get(wanted) if isinstance(batch, dict) and isinstance(batch.get(wanted), torch.Tensor) \
                else batch_target(batch)
            if target is None or not target.is_floating_point():
                raise ValueError(f"faults.{fault.index}: nan_label: expected a batch holding a floating-point target "
                                 f"(a tuple's second item, or a dict's {wanted!r}, target, mask, label or labels), "
                                 f"got {type(batch).__name__}" +
                                 ("" if target is None else f" whose target is {target.dtype}"))
            _set_pixels(target, _int(fault.params, "sample", 0), _int(fault.params, "count", 16), float("nan"))
            self._fired_now(fault, detail={"map": wanted} if isinstance(batch, dict) and wanted in batch else None)

    def after_backward(self, model: torch.nn.Module) -> None:
        """Gradient faults, on the accumulated gradients."""
        for fault in self.active("nan_gradient"):
            prefix = str(fault.params.get("module", ""))
            only = str(fault.params.get("parameter", ""))
            hit: list[str] = []
            for pname, p in model.named_parameters():
                if p.grad is None:
                    continue
                if (only and pname == only) or (not only and (not prefix or pname == prefix or pname.startswith(prefix + "."))):
                    p.grad.fill_(float("nan"))
                    hit.append(pname)
            if not hit:
                raise ValueError(f"faults.{fault.index}: nan_gradient: expected parameters with gradients under "
                                 f"{only or prefix or 'the model'!r}, got none")
            self._fired_now(fault, module=prefix or only.rpartition(".")[0], detail={"parameters": len(hit)})

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer | None) -> None:
        """Learning-rate faults, undone after the step (lr_spike) or held (lr_freeze)."""
        scale = 1.0
        fired: list[Fault] = []
        for fault in self.active("lr_spike"):
            scale *= _float(fault.params, "factor", 10000)
            fired.append(fault)
        for fault in self.active("lr_freeze"):
            scale = 0.0
            fired.append(fault)
        if not fired or optimizer is None:
            return
        self._saved_lrs = [g["lr"] for g in optimizer.param_groups]
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * scale
        for fault in fired:
            self._fired_now(fault)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer | None) -> None:
        if self._saved_lrs is not None and optimizer is not None:
            for g, lr in zip(optimizer.param_groups, self._saved_lrs):
                g["lr"] = lr
        self._saved_lrs = None


def _map_floats(output: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`output` (a tensor or nested containers) with `fn` applied to every
    floating-point tensor."""
    if isinstance(output, torch.Tensor):
        return fn(output) if output.is_floating_point() else output
    if isinstance(output, tuple):
        return tuple(_map_floats(o, fn) for o in output)
    if isinstance(output, list):
        return [_map_floats(o, fn) for o in output]
    if isinstance(output, dict):
        return {k: _map_floats(v, fn) for k, v in output.items()}
    return output
