"""Prints the performance table (Markdown) from Google Benchmark JSON results.

    python tests/bench/table.py DIR      (DIR holds harness_*.json, loader_*.json, bisect_*.json)

Every ratio is computed from numbers measured in the same benchmark run; with
repetitions, from the medians. Used by scripts/bench.sh; docs/performance.md's table
is this script's output on the committed results. Exit status: 0 when every
measured target is met, 1 when one is missed, 2 when results are missing.
"""
import glob
import json
import os
import sys


def load(directory, prefix):
    files = sorted(glob.glob(os.path.join(directory, prefix + "_*.json")))
    if not files:
        return None, {}
    with open(files[0]) as f:
        j = json.load(f)
    by_name = {}
    for b in j["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        # Medians when the run had repetitions; plain results otherwise.
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if b.get("run_type") == "aggregate" or name not in by_name:
            by_name[name] = b
    return j["context"], by_name


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def find(results, prefix):
    for name, b in results.items():
        if name.startswith(prefix):
            return b
    return None


# Dense (no sparsity) tensor-core peaks in TFLOP/s as the vendor's data
# sheets give them, by a substring of the GPU's name: (bf16, tf32). An fp32
# convolution runs as TF32 on tensor cores under PyTorch's default
# (torch.backends.cudnn.allow_tf32), so fp32 rows are judged against TF32's.
PEAKS = [
    ("H200", (989.4, 494.7)),
    ("H100 PCIe", (756.0, 378.0)),
    ("H100", (989.4, 494.7)),  # SXM5 / HBM3
    ("A100", (312.0, 156.0)),
    ("L4", (121.0, 60.0)),
]


def peak_tflops(gpu, bf16):
    for key, (p_bf16, p_tf32) in PEAKS:
        if key in (gpu or ""):
            return p_bf16 if bf16 else p_tf32
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: table.py DIR")
    directory = sys.argv[1]
    ctx, harness = load(directory, "harness")
    _, loader = load(directory, "loader")
    _, bisect = load(directory, "bisect")
    if ctx is None:
        print(f"table.py: {directory}: expected harness_*.json, found none", file=sys.stderr)
        sys.exit(2)
    rows, missed = [], 0

    def row(what, value, target, ok, note=""):
        nonlocal missed
        verdict = "—" if ok is None else ("met" if ok else "**missed**")
        missed += 1 if ok is False else 0
        rows.append(f"| {what} | {value} | {target} | {verdict} | {note} |")

    for size in (640, 128):
        tag = f"/size:{size}/"
        default = find(harness, "BM_StepDbhDefault" + tag)
        default_mon = find(harness, "BM_StepDbhDefaultMonitors" + tag)
        py_users = find(harness, "BM_StepPythonEager/users" + tag)
        plain = find(harness, "BM_StepPlain" + tag)
        nchw = find(harness, "BM_StepPlainNchw" + tag)
        cheap = find(harness, "BM_StepMonitorsCheap" + tag)
        local = find(harness, "BM_StepMonitorsLocalise" + tag)
        paired = find(harness, "BM_StepMonitorsPaired" + tag)
        vs_eager = find(harness, "BM_StepVsEagerPaired" + tag)
        vs_same = find(harness, "BM_StepVsEagerSameLayoutPaired" + tag)
        py = find(harness, "BM_StepPythonEager/nchw" + tag)
        py_cl = find(harness, "BM_StepPythonEager/channels_last" + tag)
        judged = size == 640  # the size DBNet trains at; 128² is shown for reference
        at = f" ({size}²)"
        if default:
            layout = "channels-last" if default.get("channels_last") else "NCHW"
            choice = f"{layout} × {default.get('threads', 0):.0f} threads"
            if py_users:
                r = seconds(default) / seconds(py_users)
                diff = py_users.get("loss_rel_diff")
                note = (f"{seconds(default) * 1e3:.1f} / {seconds(py_users) * 1e3:.1f} ms; dbh's auto choice here: "
                        f"{choice}; PyTorch eager NCHW with its default threads")
                if diff is not None:
                    note += f"; same weights and input (first-step loss rel. diff {diff:.1e})"
                row("dbh's default step ÷ PyTorch eager as users run it" + at, f"{r:.3f}", "≤ 1.0",
                    r <= 1.0 if judged else None, note)
            same = py_cl if default.get("channels_last") else py
            if same:
                r = seconds(default) / seconds(same)
                row("dbh's default step ÷ PyTorch eager at equal layout" + at, f"{r:.3f}", "≤ 1.02",
                    r <= 1.02 if judged else None,
                    f"{seconds(default) * 1e3:.1f} / {seconds(same) * 1e3:.1f} ms ({layout} on both sides)")
            if default_mon:
                r = seconds(default_mon) / seconds(default)
                row("dbh's default step with cheap monitors ÷ without, separate benchmarks" + at, f"{r:.3f}",
                    "— (the paired row judges)", None,
                    f"{seconds(default_mon) * 1e3:.1f} / {seconds(default) * 1e3:.1f} ms")
        def spread(b):
            # The pairs' quartiles, where the benchmark wrote them.
            if b.get("ratio_q1") is None or b.get("ratio_q3") is None:
                return ""
            return f" (pairs' quartiles {b['ratio_q1']:.3f}–{b['ratio_q3']:.3f})"
        if vs_eager:
            # The same pairing, dbh's default step against eager as users run it.
            r = vs_eager["ratio"]
            layout = "channels-last" if vs_eager.get("channels_last") else "NCHW"
            note = (f"median of {vs_eager.get('iterations', 0):.0f} pairs{spread(vs_eager)}; {vs_eager['dbh_ms']:.1f} / "
                    f"{vs_eager['eager_ms']:.1f} ms; dbh {layout} × {vs_eager.get('threads', 0):.0f} threads")
            if vs_eager.get("loss_rel_diff") is not None:
                note += f"; same weights and input (first-step loss rel. diff {vs_eager['loss_rel_diff']:.1e})"
            row("dbh's default step ÷ PyTorch eager as users run it, alternating pairs" + at, f"{r:.3f}", "≤ 1.0",
                r <= 1.0, note)
        if vs_same:
            # The same pairing with eager at dbh's layout and threads.
            r = vs_same["ratio"]
            layout = "channels-last" if vs_same.get("channels_last") else "NCHW"
            row("dbh's default step ÷ PyTorch eager at equal layout, alternating pairs" + at, f"{r:.3f}", "≤ 1.02",
                r <= 1.02, f"median of {vs_same.get('iterations', 0):.0f} pairs{spread(vs_same)}; {vs_same['dbh_ms']:.1f} / "
                f"{vs_same['eager_ms']:.1f} ms; {layout} × {vs_same.get('threads', 0):.0f} threads on both sides")
        if paired:
            # Note [Paired monitor steps] in harness_bench.cc: one trainer
            # alternates plain and monitored steps; the median of the pairs.
            r = paired["ratio"]
            layout = "channels-last" if paired.get("channels_last") else "NCHW"
            row("cheap monitors ÷ plain, the same step in alternating pairs" + at, f"{r:.3f}", "≤ 1.02", r <= 1.02,
                f"median of {paired.get('iterations', 0):.0f} pairs{spread(paired)}; {paired['monitored_ms']:.1f} / "
                f"{paired['plain_ms']:.1f} ms; {paired['inside_ms']:.1f} ms per step inside the monitors; "
                f"{layout} × {paired.get('threads', 0):.0f} threads")
        if plain and cheap:
            r = seconds(cheap) / seconds(plain)
            row("channels-last step with monitors (cheap) ÷ plain" + at, f"{r:.3f}", "—", None,
                f"{seconds(cheap) * 1e3:.1f} / {seconds(plain) * 1e3:.1f} ms")
        if plain and local:
            r = seconds(local) / seconds(plain)
            row("step in localise mode ÷ plain (replayed step)" + at, f"{r:.3f}", "— (replays only)", None,
                f"{seconds(local) * 1e3:.1f} ms")
        if plain and py:
            r = seconds(plain) / seconds(py)
            diff = py.get("loss_rel_diff")
            note = f"{seconds(plain) * 1e3:.1f} / {seconds(py) * 1e3:.1f} ms"
            if diff is not None:
                note += f"; same weights and input (first-step loss rel. diff {diff:.1e})"
            row("channels-last C++ step ÷ PyTorch eager NCHW step" + at, f"{r:.3f}", "—", None, note)
        if plain and py_cl:
            r = seconds(plain) / seconds(py_cl)
            row("dbh C++ step ÷ PyTorch eager made channels-last too" + at, f"{r:.3f}", "—", None,
                f"{seconds(py_cl) * 1e3:.1f} ms in Python with dbh's layout")
        if plain and nchw:
            r = seconds(plain) / seconds(nchw)
            row("channels-last step ÷ NCHW step (C++)" + at, f"{r:.3f}", "—", None,
                f"{seconds(nchw) * 1e3:.1f} ms with PyTorch's default layout")
    step640 = find(loader, "BM_TrainStep/resnet:18/size:640") or find(harness, "BM_TrainStep/resnet:18/size:640")
    best = None
    for name, b in loader.items():
        if name.startswith("BM_LoaderThroughput") and (best is None or b["samples/s"] > best["samples/s"]):
            best = b
    if best and step640:
        consume = step640["images/s"]
        r = best["samples/s"] / consume
        row("data loader ÷ trainer consumption (640², batch 2, R18)", f"{r:.1f}", "≥ 2", r >= 2,
            f"{best['samples/s']:.1f} samples/s ({best['name'].split('/')[1]}) vs {consume:.2f} images/s")
    trial = find(harness, "BM_TrialSpawnToFirstStep")
    if trial:
        t = seconds(trial)
        row("trial: worker spawn → first step_end", f"{t:.2f} s", "≤ 2 s", t <= 2.0,
            f"spawn → hello {trial['spawn_to_hello_ms']:.0f} ms, hello → step {trial['hello_to_step_ms']:.0f} ms")
    run = find(harness, "BM_DbhRunOneStep")
    if run:
        row("whole `dbh run`, one step, all reports", f"{seconds(run):.2f} s", "—", None, "end to end")
    for kind in ("steps", "modules", "data", "config", "range"):
        b = find(bisect, f"BM_Bisect/{kind}")
        if b:
            ok = b["found"] >= 1
            row(f"bisect {kind}: probes, wall", f"{b['probes']:.0f} probes, {seconds(b):.1f} s",
                "finds the planted cause", ok, f"{b['s_per_probe']:.2f} s per probe, {b['fresh']:.0f} run fresh")
    for n in (20, 200):
        b = find(bisect, f"BM_BisectStepsReplay/steps:{n}/from_start:0")
        z = find(bisect, f"BM_BisectStepsReplay/steps:{n}/from_start:1")
        if b:
            note = f"{b['probes']:.0f} probes"
            if z:
                note += (f"; from step 0 (--replay-from-start): {z['s_per_probe']:.2f} s per probe, "
                         f"{z['steps_per_probe']:.1f} steps per probe")
            elif b.get("fresh"):
                note += f"; from step 0 the same probes would run {b['steps_from_start'] / b['fresh']:.1f} steps each"
            if b["found"] < 1 or (z and z["found"] < 1):
                note += " (**the planted step was not found**)"
            row(f"bisect steps ({n}-step run): seconds per probe, steps replayed per probe",
                f"{b['s_per_probe']:.2f} s, {b['steps_per_probe']:.1f} steps", "—", None, note)
    _, throughput = load(directory, "throughput")
    gpu = ""
    if os.path.exists(os.path.join(directory, "machine.json")):
        with open(os.path.join(directory, "machine.json")) as f:
            gpu = json.load(f).get("gpu", "")
    for depth in (18, 50):
        for bf16 in (0, 1):
            b = find(throughput, f"BM_StepThroughput/resnet:{depth}/size:640/bf16:{bf16}")
            if not b:
                continue
            peak = peak_tflops(gpu, bf16)
            tf = b["TFLOP/s"]
            frac = f"{tf / peak:.1%} of {peak:g} TFLOP/s ({'bf16' if bf16 else 'TF32'} dense peak, {gpu})" if peak \
                else "the device's peak is not in table.py's list"
            row(f"training throughput, ResNet-{depth} + FPN 640², {'bf16' if bf16 else 'fp32'}, batch {b['batch']:.0f}",
                f"{b['images/s']:.1f} images/s, {tf:.2f} TFLOP/s", "—", None,
                f"{seconds(b) * 1e3:.1f} ms per step, {b['GFLOP/step']:.0f} GFLOP per step (convolutions and matrix "
                f"products); {frac}")
    _, adapter = load(directory, "adapter")
    for size in (128, 256):
        plain = find(adapter, f"BM_LightningStep/plain/size:{size}")
        cheap = find(adapter, f"BM_LightningStep/adapter_cheap/size:{size}")
        if plain and cheap:
            ratio = seconds(cheap) / seconds(plain)
            row(f"the adapter's cheap monitors ÷ plain Lightning step (the example, {size}²)", f"{ratio:.3f}", "≤ 1.05",
                ratio <= 1.05, f"{seconds(cheap) * 1e3:.1f} / {seconds(plain) * 1e3:.1f} ms, medians of "
                f"{cheap.get('steps', '?')} steps each, fits interleaved at random in one process")
    q = find(bisect, "BM_Qualify")
    if q:
        ok = q["trials"] <= 3 and q["found"] >= 1
        row("qualify (CI host budget, R18 384², batch 8): trials, wall", f"{q['trials']:.0f} trials, {seconds(q):.1f} s",
            "≤ 3 trials, recommends 4 × 2", ok,
            f"wall ÷ one trial at the answer = {q['wall_per_answer_trial']:.2f} (target ≤ 2: "
            f"{'met' if q['wall_per_answer_trial'] <= 2 else 'missed'}); {q.get('label', '')}")
    machine = os.path.join(directory, "machine.json")
    if os.path.exists(machine):
        with open(machine) as f:
            m = json.load(f)
        print(f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores at {m.get('mhz', '?')} MHz, "
              f"instruction sets {m.get('isa', '?')}; GPU: {m.get('gpu') or 'none'}; {m.get('os', '')}, "
              f"LibTorch {m.get('torch', '?')}")
    print(f"Run: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"load average at start {', '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}; {ctx.get('date', '')}")
    # Where dbh's default came from (scripts/bench.sh's DBH_BENCH_CACHE): the
    # `auto` choice a `dbh run` took at each size, and why.
    auto = os.path.join(directory, "auto.json")
    if os.path.exists(auto):
        with open(auto) as f:
            a = json.load(f)
        parts = []
        for size in sorted(a, key=lambda s: -int(s)):
            e = a[size]
            why = e.get("over_budget") or e.get("untrusted") or e.get("error")
            parts.append(f"{size}²: {'channels-last' if e.get('channels_last') else 'NCHW'} × {e.get('threads', '?')} "
                         f"({e.get('source', '?')}{': ' + why if why else ''})")
        cache = next(iter(a.values()), {}).get("cache", "?")
        where = "the user's tuning cache as earlier runs left it" if cache == "user" else "an empty tuning cache"
        print(f"dbh's default (`auto` as `dbh run` took it, from {where}): " + "; ".join(parts))
    print()
    print("| measure | value | target | result | detail |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
