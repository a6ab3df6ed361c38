"""One training under dbh: the events of docs/events.md from any PyTorch loop.

A Session is what `dbh_adapter.connect()` returns. Outside dbh it is
inactive and every method passes its arguments through, so the same script
runs with and without dbh. Under dbh it follows the step of docs/events.md:

    begin_step(step, batch) -> step_begin, batch, faults on the batch
    loss(loss)              -> the micro-batch's loss (bits, finite flag)
    after_backward(model)   -> gradient faults
    before_optimizer_step   -> gradient checks, the step's finding (or the loss
                               scaler's skip), lr faults
    end_step(...)           -> step_end, checkpoint, stop after train.stop_after

The Lightning callback (dbh_adapter.lightning) and the plain-loop helpers
(Session.steps, Session.backward, Session.optimizer_step) call these.
"""

import hashlib
import os
import resource
import struct
import sys
import time
import traceback

import torch

from . import _protocol
from ._faults import FaultSet, _input_tensor
from ._monitors import FiniteMonitor, Finding

VERSION = "0.1.0"

# What this adapter serves (docs/worker-protocol.md, "Capabilities").
BASE_CAPABILITIES = ("loss_bits", "stop_after", "checkpoint", "resume", "subset", "monitors.finite",
                     "monitors.localise", "memory_budget")

# Note [Loss-scaler skips] (harness/monitors/monitors.cc), as dbh's own worker
# judges it: with fp16 a dynamic loss scaler (torch.amp.GradScaler) skips the
# optimizer step whose gradients overflow and lowers its scale; a few skips are
# its normal work. Only this many skipped steps in a row are a failure,
# reported from the first of them (proto::kScalerSkipLimit, harness/proto/event_types.h).
SCALER_SKIP_LIMIT = 8


def _memory():
    """The process's memory; on CUDA what the training holds, without the
    budget's ballast (held in the same caching allocator, below)."""
    rss = 0
    try:
        with open("/proc/self/statm", "r") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"rss_bytes": rss, "peak_rss_bytes": max(peak, rss)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        held = sum(size for _, size in _BALLAST)
        out.update(cuda_allocated_bytes=max(0, torch.cuda.memory_allocated() - held),
                   cuda_reserved_bytes=max(0, torch.cuda.memory_reserved() - held),
                   cuda_peak_allocated_bytes=max(0, torch.cuda.max_memory_allocated() - held),
                   cuda_peak_reserved_bytes=max(0, torch.cuda.max_memory_reserved() - held))
    return out


# (pointer, bytes) of the budget's ballast, held for the life of the process on
# purpose. Every memory figure the adapter reports leaves it out: it is dbh's
# emulation of a smaller card, not the training's memory (on an H200 a 12 GiB
# budget holds 129 GiB, which qualify read as the training's peak).
_BALLAST = []


def apply_memory_budget(device, budget):
    """hardware.memory_budget as dbh's own worker applies it: on the CPU the
    data segment capped (RLIMIT_DATA); on CUDA a ballast holding what the card
    has beyond the budget and the caching allocator capped at the rest. The
    `memory_budget` event's fields."""
    out = {"applied": False, "method": "", "budget_bytes": budget, "device_total": 0, "used_before": 0,
           "ballast_bytes": 0, "allocator_fraction": 0.0, "detail": ""}
    if device == "cpu":
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (budget, budget))
            out["applied"] = True
        except (ValueError, OSError) as e:
            out["detail"] = f"setrlimit failed: {e}"
            return out
        out["method"] = "RLIMIT_DATA"
        out["detail"] = (f"The worker's data segment and anonymous mappings (Python, torch, tensors) are capped at "
                         f"{budget} bytes; shared libraries' code is not counted")
        return out
    if not torch.cuda.is_available():
        out["detail"] = "no CUDA device"
        return out
    d = torch.device(device)
    index = d.index if d.index is not None else 0
    torch.cuda.set_device(index)
    torch.empty(1, device=d)  # the context first, so that its memory is counted
    free, total = torch.cuda.mem_get_info(index)
    out["device_total"], out["used_before"] = total, total - free
    available = budget - (total - free)
    if available <= 0:
        out["detail"] = f"the budget is smaller than what the context already uses ({total - free} bytes)"
        return out
    ballast = max(0, free - available)
    # The ballast is a block of the caching allocator held for good: the
    # allocator's cap is the ballast plus what the budget leaves, so tensors
    # get `available` and the card's other memory stays taken. Seen on an H100
    # (reports/examples/gpu/h100-2026-11-27): an out-of-memory error under a
    # 1 GiB budget then says "78.55 GiB is allocated by PyTorch", the ballast
    # included; the detail says so.
    if ballast > 0:
        _BALLAST.append((torch.cuda.caching_allocator_alloc(ballast, index), ballast))
    out["ballast_bytes"] = ballast
    out["allocator_fraction"] = min(1.0, (ballast + available) / total)
    torch.cuda.set_per_process_memory_fraction(out["allocator_fraction"], index)
    out["applied"] = True
    out["method"] = "cuda ballast + allocator limit"
    out["detail"] = (f"card {total} bytes, already used {total - free}, ballast {ballast} held in the caching "
                     f"allocator (PyTorch's out-of-memory message counts it as allocated by PyTorch; the memory dbh reports "
                     f"leaves it out), tensors "
                     f"capped at {available}; cuDNN/cuBLAS workspaces compete for the same budget")
    return out


def float_bits(x):
    """The float32 bit pattern of `x` (a tensor or a number): equal bits, equal runs."""
    value = float(x.detach().float().cpu()) if isinstance(x, torch.Tensor) else float(x)
    return struct.unpack("<I", struct.pack("<f", value))[0]


class Session:
    """A training connected to dbh (or not: `active` False)."""

    def __init__(self, link=None, framework="pytorch"):
        self.link = link
        self.active = link is not None
        self.framework = framework
        self.step = -1
        self.said_hello = False
        self.finished = False
        self.stop_requested = False
        self.training = False  # the step loop began: errors from here on have a step
        self._step_open = False
        self._t0 = 0.0
        self._micro_bits = []
        self._last_loss = None
        self._model = None
        self.scaler = None  # a plain loop's torch.amp.GradScaler (watch)
        self._skip_streak = 0
        self._streak_first = None  # the first skipped step's finding
        self._skipped = False
        self._loss_scale = 1.0
        if not self.active:
            return
        s = link.scenario
        self.train = link.section("train")
        self.data = link.section("data")
        self.monitors_cfg = link.section("monitors")
        self.faults = FaultSet(s.get("faults"), link.events.emit)
        self.monitor = FiniteMonitor(self.monitors_cfg.get("mode", "cheap"))

    # --- facts from the scenario ----------------------------------------------

    @property
    def max_steps(self):
        return int(self.train.get("max_steps", 0)) if self.active else None

    @property
    def last_step(self):
        """Steps this run trains: train.stop_after, else train.max_steps."""
        if not self.active:
            return None
        stop = int(self.train.get("stop_after", 0) or 0)
        return stop if stop > 0 else self.max_steps

    @property
    def seed(self):
        return int(self.train.get("seed", 0)) if self.active else None

    def resume_path(self):
        """The checkpoint dbh asks this run to resume from, or None."""
        if not self.active:
            return None
        return self.train.get("resume_from") or None

    def capabilities(self):
        faults = tuple("fault:" + name for name in FaultSet.SUPPORTED)
        return list(BASE_CAPABILITIES) + list(faults)

    def dataset(self, dataset):
        """The training dataset, restricted to data.subset when dbh asks for it
        (indices in dbh's order of the dataset: `dbh data check` lists it)."""
        if not self.active:
            return dataset
        subset = self.data.get("subset") or []
        if not subset:
            return dataset
        n = len(dataset)
        bad = [i for i in subset if not 0 <= int(i) < n]
        if bad:
            raise IndexError(f"data.subset: expected indices below the dataset's {n} samples, got {bad[:5]}")
        return torch.utils.data.Subset(dataset, [int(i) for i in subset])

    # --- the protocol's frame -------------------------------------------------

    def hello(self, model, device="cpu", framework_version=""):
        """The first event: who trains, what it serves, its modules. In
        describe mode the process ends here (dbh only asked what it serves)."""
        if not self.active or self.said_hello:
            return
        self.said_hello = True
        self._model = model
        ev = self.link.events
        worker = f"dbh-adapter {VERSION} ({self.framework}{' ' + framework_version if framework_version else ''}, " \
                 f"torch {torch.__version__})"
        ev.emit("hello", schema_version=_protocol.EVENT_SCHEMA_VERSION, pid=os.getpid(), seed=self.seed,
                scenario_hash=self.link.scenario_hash, scenario=self.link.scenario.get("name", ""),
                trial=self.link.trial, git="", dbh_version="", torch_version=torch.__version__,
                device=str(device), threads=torch.get_num_threads(), worker=worker,
                capabilities=self.capabilities(), modules=[n for n, _ in model.named_modules() if n])
        if self.link.describe:
            ev.emit("done", status="described")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        budget = int(self.link.section("hardware").get("memory_budget", 0) or 0)
        if budget > 0:
            ev.emit("memory_budget", **apply_memory_budget(str(self.link.section("hardware").get("device", "cpu")), budget))
        self.faults.attach(model)
        self.monitor.attach(model, always=self.faults.modules())
        ev.emit("run_begin", run=0, memory=_memory())

    def harness_error(self, message):
        """The command does not train what the scenario says (a key that did
        not reach its configuration): the trial is unresolved, not a failure."""
        if not self.active:
            return
        self.link.events.emit("error", kind="harness", message=message)
        self.done("error")

    def begin_step(self, step, batch):
        if not self.active:
            return
        self.step = step
        self._step_open = True
        self._t0 = time.monotonic()
        self._micro_bits = []
        ev = self.link.events
        ev.emit("step_begin", run=0, step=step)
        ids = _sample_ids(batch)
        if ids:
            ev.emit("batch", run=0, step=step, samples=ids)
        self.monitor.begin_step(step)
        self.faults.on_step_begin(step, batch)
        self.monitor.check_input(_input_tensor(batch))

    def micro_batch(self, batch):
        """A later micro-batch of the same step (gradient accumulation)."""
        if self.active:
            self.faults.on_step_begin(self.step, batch)
            self.monitor.check_input(_input_tensor(batch))

    def loss(self, loss):
        if not self.active:
            return
        self.monitor.check_loss(loss)

    def record_loss(self, loss):
        """The micro-batch's loss as the user's code computed it (unscaled)."""
        if not self.active or loss is None:
            return
        self._last_loss = float(loss.detach().float().cpu()) if isinstance(loss, torch.Tensor) else float(loss)
        self._micro_bits.append(float_bits(self._last_loss))

    def after_backward(self, model):
        if self.active:
            self.faults.after_backward(model)

    def before_optimizer_step(self, model, optimizer, scaler=None):
        """The step's finite checks (one read in cheap mode), on gradients the
        loss scaler (if any) has unscaled; raises Finding. With an fp16 loss
        scaler, gradients that overflow are the scaler's skipped step, not a
        finding, until SCALER_SKIP_LIMIT steps in a row."""
        if not self.active:
            return
        scaler = scaler if scaler is not None else self.scaler
        scaling = scaler is not None and scaler.is_enabled()
        self._loss_scale = float(scaler.get_scale()) if scaling else 1.0
        self._skipped = False
        self.monitor.check_gradients(model)
        finding = self.monitor.first_finding()
        if finding is None:
            self._skip_streak = 0
        else:
            finding.sites = self.monitor.sites()
            if not scaling or set(finding.sites) != {"gradient"}:
                raise finding
            self._scaler_skip(finding)
        self.faults.before_optimizer_step(optimizer)

    def _scaler_skip(self, finding):
        """A step the loss scaler skips: its `health` event (check loss_scaler,
        not primary); at the limit the streak's first step is the finding."""
        if self._skip_streak == 0:
            self._streak_first = finding
        self._skip_streak += 1
        self._skipped = True
        self.link.events.emit("health", run=0, step=finding.step, check="loss_scaler", kind="gradient",
                              site=finding.site, module=finding.module or None, primary=False,
                              skipped_in_a_row=self._skip_streak, limit=SCALER_SKIP_LIMIT)
        if self._skip_streak < SCALER_SKIP_LIMIT:
            return
        first = self._streak_first
        raise Finding("gradient", first.site, first.module, first.step, sites=finding.sites,
                      message=f"non-finite gradient in {first.site} from step {first.step}: the loss scaler "
                              f"skipped {self._skip_streak} steps in a row (the gradients stay non-finite at "
                              f"every scale)", extra={"loss_scaler_skips": self._skip_streak})

    def after_optimizer_step(self, optimizer):
        if self.active:
            self.faults.after_optimizer_step(optimizer)

    def end_step(self, lr=0.0, samples=0):
        if not self.active or not self._step_open:
            return
        self._step_open = False
        loss = self._last_loss if self._last_loss is not None else float("nan")
        self.link.events.emit("step_end", run=0, step=self.step, loss=loss, bce=0.0, l1=0.0, dice=0.0,
                              loss_bits=self._micro_bits[-1] if self._micro_bits else float_bits(loss),
                              micro_loss_bits=list(self._micro_bits), grad_norm_bits=0, lr=float(lr),
                              grad_norm=0.0, skipped=self._skipped, loss_scale=self._loss_scale,
                              seconds=round(time.monotonic() - self._t0, 6), samples=int(samples),
                              memory=_memory())
        if self.step + 1 >= self.last_step:
            self.stop_requested = True

    def checkpoint_due(self, next_step):
        every = int(self.train.get("checkpoint_every", 0) or 0) if self.active else 0
        return every > 0 and next_step % every == 0 and next_step < self.last_step

    def checkpoint_path(self, next_step):
        """Where the checkpoint to resume at `next_step` goes: the trial folder,
        named as dbh's bisections look for it."""
        return os.path.join(self.link.trial_dir, f"checkpoint-r0-s{next_step}.pt")

    def checkpoint_written(self, next_step, path, resumed=False):
        if self.active:
            self.link.events.emit("checkpoint", run=0, step=next_step, path=path, resumed=True if resumed else None)

    def diverged(self, finding):
        """The monitors' finding: the primary `health` event, the error, done."""
        if not self.active or self.finished:
            return
        ev = self.link.events
        ev.emit("health", run=0, step=finding.step, check="finite", kind=finding.kind, site=finding.site,
                module=finding.module or None, mode=self.monitor.mode, primary=True, stats=finding.stats,
                input_module=finding.input_module, input_stats=finding.input_stats,
                nonfinite_sites=finding.sites, **finding.extra)
        ev.emit("error", kind="diverged", message=str(finding), run=0, step=finding.step,
                module=finding.module or None, phase="train")
        self.done("diverged")

    def exception(self, exc, phase="train"):
        """Any other exception: its error event (kind, message, step, traceback), then done."""
        if not self.active or self.finished:
            return
        if isinstance(exc, Finding):
            self.diverged(exc)
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        kind = "data" if _from_data(exc) else "exception"
        # The step in progress, or the one about to begin: an error while
        # fetching its batch (Lightning fetches one batch ahead) belongs to it.
        step = (self.step if self._step_open else self.step + 1) if self.training else None
        self.link.events.emit("error", kind=kind, message=f"{type(exc).__name__}: {exc}",
                              run=0, step=step, phase="data" if kind == "data" else phase,
                              backtrace=text[-8000:], module=self.monitor.last_module or None,
                              memory=_memory())
        self.done("error")

    def done(self, status="passed"):
        if not self.active or self.finished:
            return
        self.finished = True
        ev = self.link.events
        if status == "passed":
            ev.emit("run_end", run=0, steps=self.step + 1, checksum=_checksum(self._model), memory=_memory())
        ev.emit("done", status=status, memory=_memory())

    # --- a plain PyTorch loop ---------------------------------------------------

    def watch(self, model, optimizer=None, device="cpu", scaler=None):
        """Plain loops: call once the model is built (writes `hello`). With a
        loss scaler (torch.amp.GradScaler, fp16) `backward` scales the loss and
        `optimizer_step` unscales, steps and updates it, as PyTorch's AMP
        recipe does; a step it skips is judged as Note [Loss-scaler skips]."""
        self._optimizer = optimizer
        self.scaler = scaler
        self.hello(model, device=device)
        return model

    def steps(self, batches, max_steps=None, start=0):
        """Plain loops: yields (step, batch) from `batches` (an iterable, cycled)
        for `max_steps` steps, each one optimizer step. Under dbh the run stops
        at train.stop_after when dbh asks, and a `max_steps` other than the
        scenario's train.max_steps is a key that did not reach the script."""
        step = start
        self.training = True
        if self.active and max_steps is not None and int(max_steps) != self.max_steps:
            self.harness_error(f"train.max_steps is {self.max_steps} in the scenario but the script trains "
                               f"{max_steps} steps: the key did not reach its arguments (worker.keys maps dbh keys "
                               f"to yours)")
            raise SystemExit(3)
        last = self.last_step if self.active else max_steps
        while last is None or step < last:
            produced = False
            for batch in batches:
                produced = True
                if last is not None and step >= last:
                    return
                self.begin_step(step, batch)
                yield step, batch
                step += 1
            if not produced or last is None:
                return

    def backward(self, loss):
        """Plain loops: checks and records the loss, then loss.backward() and
        the gradient faults."""
        self.loss(loss)
        self.record_loss(loss)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self._model is not None:
            self.after_backward(self._model)

    def optimizer_step(self, optimizer=None, samples=0):
        """Plain loops: the step's checks, optimizer.step(), zero_grad, step_end."""
        opt = optimizer or getattr(self, "_optimizer", None)
        if self.scaler is not None:
            self.scaler.unscale_(opt)
        if self.active and self._model is not None:
            self.before_optimizer_step(self._model, opt)
        if self.scaler is not None:
            self.scaler.step(opt)  # skipped when the unscaled gradients are not finite
            self.scaler.update()
        else:
            opt.step()
        self.after_optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        self.end_step(lr=opt.param_groups[0]["lr"], samples=samples)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            self.exception(exc)
        else:
            self.done("passed")
        return False


def _checksum(model):
    """The final parameters' bits as 16 hex digits: equal runs, equal checksums."""
    if model is None:
        return ""
    h = hashlib.blake2b(digest_size=8)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            h.update(name.encode())
            t = p.detach().contiguous().cpu()
            h.update(_tensor_bytes(t))
    return h.hexdigest()


def _tensor_bytes(t):
    if t.numel() == 0:
        return b""
    raw = t.reshape(-1).view(torch.uint8)
    try:
        return raw.numpy().tobytes()
    except (RuntimeError, ImportError):  # torch without numpy
        return bytes(raw.tolist())


def _sample_ids(batch):
    if isinstance(batch, dict):
        for key in ("id", "ids", "name", "names", "file", "files"):
            ids = batch.get(key)
            if isinstance(ids, (list, tuple)) and all(isinstance(i, str) for i in ids):
                return list(ids)
    return []


def _from_data(exc):
    """Whether the exception came from reading data (a dataset's __getitem__)."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        if name == "__getitem__" or name == "__getitems__":
            return True
        tb = tb.tb_next
    return False
