"""monitors.numerics: every module's numbers at every step, for a numerics
reference (Note [A numerics reference] in harness/numerics/reference.h).

The modules measured are the model's named modules, the ones `hello` lists
(at most 512), in the order their outputs are made (a container after the
modules inside it): for each, the mean absolute value of its output, and for
one holding parameters of its own, the L2 norm of their gradients. The reductions stay on the device until the step ends and are read
there with one copy, as `step_end`'s `numerics`.
"""

from __future__ import annotations

from typing import Any

import torch

from ._monitors import _tensors

# dbh reads at most this many modules of one step (kMaxNumericsModules).
MAX_MODULES = 512


class NumericsWatch:
    """Forward hooks on the model's named modules; one read per step."""

    def __init__(self, on: bool, jitter: float = 0.0, trial: int = 0) -> None:
        self.on = on
        # monitors.numerics_jitter: in trial k > 0 every module's output moves
        # by `jitter`, relative, in a normal pattern drawn from a generator
        # seeded by k (as rounding that differs in the last digits does at
        # every layer); trial 0 trains unchanged. A pattern, not a constant:
        # batch norm removes an offset or a scale.
        self.jitter = jitter if on and trial > 0 else 0.0
        self._generator = torch.Generator().manual_seed(max(trial, 0))
        self._modules: dict[str, torch.nn.Module] = {}
        self._handles: list[Any] = []
        self._acts: dict[str, torch.Tensor] = {}  # in forward order, this step
        self._grads: dict[str, torch.Tensor] = {}

    def attach(self, model: torch.nn.Module) -> None:
        """Hooks on `model`'s named modules (call after the faults' hooks: an
        output a fault changed is the one measured)."""
        if not self.on:
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._modules = {}
        for name, module in model.named_modules():
            if not name:
                continue
            if len(self._modules) >= MAX_MODULES:
                break
            self._modules[name] = module
            self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
            if not torch.is_grad_enabled():  # validation and inference are not the step
                return None
            t = next(_tensors(output), None)
            if t is None or t.numel() == 0 or not t.is_floating_point():
                return None
            mean_abs = t.detach().abs().mean(dtype=torch.float32)
            self._acts.pop(name, None)  # a later micro-batch's output replaces it, in its place
            self._acts[name] = mean_abs
            if not self.jitter or not isinstance(output, torch.Tensor):
                return None
            pattern = torch.randn(t.shape, generator=self._generator, dtype=torch.float32)
            noise = (pattern.to(t.device) * (mean_abs * self.jitter)).to(t.dtype)
            return output + noise  # a constant to autograd
        return hook

    def begin_step(self) -> None:
        self._acts = {}
        self._grads = {}

    def gradients(self) -> None:
        """Each module's own gradient norm (call once the gradients are final:
        unscaled, before the optimizer step)."""
        if not self.on:
            return
        for name, module in self._modules.items():
            norms = [p.grad.detach().float().norm() for p in module.parameters(recurse=False) if p.grad is not None]
            if norms:
                self._grads[name] = torch.stack(norms).norm() if len(norms) > 1 else norms[0]

    def read(self) -> list[dict[str, Any]] | None:
        """This step's numbers in forward order (modules with gradients and no
        output seen after them); None when off or nothing was measured."""
        if not self.on or not (self._acts or self._grads):
            return None
        names = list(self._acts) + [n for n in self._grads if n not in self._acts]
        values = torch.stack([t.reshape(()).to("cpu", torch.float64) for t in
                              list(self._acts.values()) + list(self._grads.values())]).tolist()
        acts = dict(zip(self._acts, values[:len(self._acts)]))
        grads = dict(zip(self._grads, values[len(self._acts):]))
        out: list[dict[str, Any]] = []
        for name in names:
            entry: dict[str, Any] = {"module": name}
            for key, table in (("act", acts), ("grad", grads)):
                v = table.get(name)
                if v is not None and v == v and abs(v) != float("inf"):
                    entry[key] = v
            out.append(entry)
        self._acts = {}
        self._grads = {}
        return out
