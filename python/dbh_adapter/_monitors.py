"""The finite checks with module attribution, on any torch.nn.Module.

Cheap mode (monitors.mode cheap) collects one flag per module output, the
loss and each module's gradients without synchronising, and reads them all
once per optimizer step; the first non-finite one in the order the step
computed them (input, forward outputs, loss, gradients in the order autograd
accumulated them) is the finding. Localise mode reads each flag as it is made
and adds the tensor's statistics and the module that ran before it.
"""

import torch


def _tensors(value):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _all_finite(value):
    flags = [torch.isfinite(t).all() for t in _tensors(value)]
    if not flags:
        return None
    return flags[0] if len(flags) == 1 else torch.stack(flags).all()


def stats(value):
    """min, max, mean over the finite values and the NaN/Inf counts."""
    ts = list(_tensors(value))
    if not ts:
        return None
    t = ts[0].detach().float()
    finite = t[torch.isfinite(t)]
    out = {"numel": t.numel(), "nan": int(torch.isnan(t).sum()), "inf": int(torch.isinf(t).sum())}
    if finite.numel():
        out.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()))
    return out


class Finding(Exception):
    """A non-finite value the monitors found: stops the step."""

    def __init__(self, kind, site, module, step, stats_=None, input_module=None, input_stats=None):
        super().__init__(f"non-finite {kind} ({site}) at step {step}")
        self.kind, self.site, self.module, self.step = kind, site, module, step
        self.stats, self.input_module, self.input_stats = stats_, input_module, input_stats


class FiniteMonitor:
    def __init__(self, mode):
        self.mode = mode  # "cheap" | "localise" | "off"
        self.step = -1
        self._flags = []  # (kind, site, module, flag tensor) in the order the step made them
        self._grad_order = []
        self._last_output = None  # (module name, output) of the last module that ran (localise)
        self.last_module = ""

    @property
    def on(self):
        return self.mode in ("cheap", "localise")

    def attach(self, model):
        if not self.on:
            return
        for name, module in model.named_modules():
            if name:
                module.register_forward_hook(self._forward_hook(name))
        for pname, p in model.named_parameters():
            if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                p.register_post_accumulate_grad_hook(self._grad_hook(pname))

    def begin_step(self, step):
        self.step = step
        self._flags.clear()
        self._grad_order.clear()
        self._last_output = None

    def _forward_hook(self, name):
        def hook(module, args, output):
            if not torch.is_grad_enabled():
                return None
            self.last_module = name
            flag = _all_finite(output)
            if flag is None:
                return None
            if self.mode == "localise":
                if not bool(flag):
                    before = self._last_output
                    raise Finding("activation", name + " output", name, self.step, stats(output),
                                  before[0] if before else None, stats(before[1]) if before else None)
                self._last_output = (name, output)
            else:
                self._flags.append(("activation", name + " output", name, flag))
            return None
        return hook

    def _grad_hook(self, pname):
        def hook(p):
            self._grad_order.append((pname, p))
        return hook

    def check_input(self, tensor):
        if tensor is None or not self.on:
            return
        flag = torch.isfinite(tensor).all()
        if self.mode == "localise" and not bool(flag):
            raise Finding("input", "batch input", "", self.step, stats(tensor))
        self._flags.append(("input", "batch input", "", flag))

    def check_loss(self, loss):
        if not self.on:
            return
        flag = torch.isfinite(loss.detach()).all()
        if self.mode == "localise" and not bool(flag):
            raise Finding("loss", "loss", "", self.step, stats(loss))
        self._flags.append(("loss", "loss", "", flag))

    def check_gradients(self, model):
        """After the step's backward (and accumulation): gradients in the order
        autograd produced them, parameters without a hook after them."""
        if not self.on:
            return
        seen = {name for name, _ in self._grad_order}
        order = list(self._grad_order) + [(n, p) for n, p in model.named_parameters() if n not in seen]
        for pname, p in order:
            if p.grad is None:
                continue
            module = pname.rpartition(".")[0]
            self._flags.append(("gradient", pname + ".grad", module, torch.isfinite(p.grad).all()))

    def first_finding(self):
        """Reads the step's flags at once; the first non-finite, or None."""
        if not self._flags:
            return None
        flags = torch.stack([f[3].reshape(()) for f in self._flags]).cpu()
        bad = (~flags).nonzero()
        if bad.numel() == 0:
            return None
        kind, site, module, _ = self._flags[int(bad[0])]
        return Finding(kind, site, module, self.step)

    def sites(self):
        """Non-finite sites per kind, consequences included (after first_finding)."""
        out = {}
        for kind, _, _, flag in self._flags:
            if not bool(flag):
                out[kind] = out.get(kind, 0) + 1
        return out
