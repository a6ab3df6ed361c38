"""The adapter's cost on a user's own Lightning training: the example's step
(examples/lightning-dbnet) with the dbh callback in cheap-monitor mode against
the same step without it, measured side by side in one process.

    python tests/bench/python/adapter_overhead.py OUT.json [--sizes 128,256] [--reps 5] [--steps 12]

Each repetition trains a fresh model (same seed, same batches, held in memory
so that data loading is not measured) once plain and once with the adapter,
in an order drawn at random; a step is timed from Lightning's
on_train_batch_start to on_train_batch_end (forward, backward, optimizer),
the first two steps of every fit left out. Every fit starts after a garbage
collection and malloc_trim, as the adapter's run end makes them. The result is Google Benchmark's
JSON (one median per configuration) for tests/bench/table.py.
"""
import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "lightning-dbnet")
sys.path[:0] = [EXAMPLE, os.path.join(ROOT, "python")]
sys.dont_write_bytecode = True

import lightning as L  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import dbh_adapter  # noqa: E402
from dbh_adapter._memory import release_free_memory  # noqa: E402
from data import DBNetDataModule  # noqa: E402
from dbnet_lite import DBNetLite  # noqa: E402


class StepTimer(L.Callback):
    def __init__(self):
        self.times = []
        self._t = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.times.append(time.perf_counter() - self._t)


def batches(cfg, count):
    dm = DBNetDataModule(cfg, dbh_adapter.connect({}))
    dm.setup("fit")
    out = []
    while len(out) < count:
        for b in dm.train_dataloader():
            out.append(b)
            if len(out) == count:
                break
    return out


def session(tmp, steps):
    scenario = os.path.join(tmp, "scenario.json")
    with open(scenario, "w") as f:
        json.dump({"name": "bench", "train": {"max_steps": steps, "seed": 42}, "data": {},
                   "monitors": {"mode": "cheap"}, "hardware": {"device": "cpu"}, "faults": []}, f)
    fd = os.open(os.devnull, os.O_WRONLY)
    env = {"DBH_WORKER_PROTOCOL": "1", "DBH_EVENT_FD": str(fd), "DBH_SCENARIO": scenario, "DBH_TRIAL_DIR": tmp}
    return dbh_adapter.connect(env)


def fit(cfg, data, steps, with_adapter, tmp):
    # Every fit starts from the same heap: the adapter's run end collects
    # garbage and gives free memory back to the system (Note [What a run
    # leaves behind]), which would otherwise slow whichever fit follows it.
    gc.collect()
    release_free_memory()
    L.seed_everything(42, workers=False, verbose=False)
    module = DBNetLite(OmegaConf.to_container(cfg.model, resolve=True))
    timer = StepTimer()
    callbacks = [timer]
    if with_adapter:
        callbacks = [*session(tmp, steps).lightning_callbacks(), timer]
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                        default_root_dir=tmp)
    loader = torch.utils.data.DataLoader(data, batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    return timer.times[2:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sizes", default="128,256")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("DBH_BENCH_THREADS", "1")))
    results = []
    rng = random.Random(1)
    for size in [int(s) for s in a.sizes.split(",")]:
        cfg = OmegaConf.load(os.path.join(EXAMPLE, "configs", "train.yaml"))
        cfg.preprocessing.target_size = size
        cfg.datasets.train.path = os.path.join(ROOT, "fixtures", "real")
        data = batches(cfg, a.steps)
        times = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(a.reps):
                order = [False, True]
                rng.shuffle(order)
                for with_adapter in order:
                    times[with_adapter] += fit(cfg, data, a.steps, with_adapter, tmp)
        for with_adapter, name in ((False, "BM_LightningStep/plain"), (True, "BM_LightningStep/adapter_cheap")):
            t = times[with_adapter]
            results.append({"name": f"{name}/size:{size}", "run_name": f"{name}/size:{size}", "run_type": "aggregate",
                            "aggregate_name": "median", "real_time": statistics.median(t) * 1e3, "time_unit": "ms",
                            "steps": len(t), "cv": statistics.pstdev(t) / statistics.mean(t)})
        print(f"size {size}: plain {results[-2]['real_time']:.1f} ms, adapter {results[-1]['real_time']:.1f} ms, "
              f"ratio {results[-1]['real_time'] / results[-2]['real_time']:.3f}", file=sys.stderr)
    context = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host_name": platform.node(),
               "num_cpus": os.cpu_count(), "load_avg": list(os.getloadavg()), "torch": torch.__version__,
               "lightning": L.__version__, "threads": torch.get_num_threads()}
    with open(a.out, "w") as f:
        json.dump({"context": context, "benchmarks": results}, f, indent=1)


if __name__ == "__main__":
    main()
