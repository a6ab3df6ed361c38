"""Compares two op-level traces of one training step, op by op.

    python tests/bench/python/compare_traces.py CPP_TRACE.json PY_TRACE.json [N]

The traces come from DBH_BENCH_TRACE=DIR ./dev bench --benchmark_filter=... (harness_bench.cc writes
cpp_<layout>_<size>.json, dbnet_step.py --serve writes py_<layout>_<size>.json). Prints, for the N
ops with the most time on either side, the total milliseconds (inclusive: nested ops count in their
parents too) and calls on each side, largest difference first. Only the standard library.
"""
import json
import sys
from collections import defaultdict


def totals(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    out = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            out[e["name"]][0] += float(e["dur"]) / 1e3
            out[e["name"]][1] += 1
    return out


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: compare_traces.py CPP_TRACE PY_TRACE [N]")
    cpp, py = totals(sys.argv[1]), totals(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 30
    names = sorted(set(cpp) | set(py), key=lambda k: -max(cpp[k][0], py[k][0]))[:n]
    names.sort(key=lambda k: -(cpp[k][0] - py[k][0]))
    print(f"{'op':48} {'C++ ms':>10} {'calls':>6} {'Py ms':>10} {'calls':>6} {'C++-Py':>9}")
    for k in names:
        print(f"{k[:48]:48} {cpp[k][0]:10.1f} {cpp[k][1]:6d} {py[k][0]:10.1f} {py[k][1]:6d} {cpp[k][0] - py[k][0]:9.1f}")


if __name__ == "__main__":
    main()
