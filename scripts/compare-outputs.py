#!/usr/bin/env python3
"""Records what `dbh run` says of every shipped scenario, and compares two records.

A refactoring that changes no behaviour leaves every shipped scenario's exit
code, printed output and reports as they were, except for timings, memory
measurements and paths. This script is how that is checked:

  scripts/compare-outputs.py record DBH OUT [--only NAME ...]
      runs `DBH run S --out OUT/runs/<name>` for each scenario S under
      scenarios/ (the fragments under base/ and hardware/ are not runs), each
      with its own empty cache under OUT/, and keeps its exit code, stdout,
      stderr, report.json and report.md normalised into OUT/<name>/.
  scripts/compare-outputs.py normalise OUT
      writes OUT/<name>/ again from the raw outputs kept under OUT/runs/.
  scripts/compare-outputs.py diff BEFORE AFTER [--again BEFORE2]
      compares two records file by file; prints each difference and exits 1
      if there is one, 0 if the records agree. BEFORE2, a second record of
      BEFORE's binary, names what varies from run to run (listed, not
      counted): under a memory cap, where the allocation fails can move.

Normalised away: the binary's and the record's paths, timestamps, durations,
memory sizes, the inputs manifest (it hashes the binary) and, in report.json,
every key whose value is a measurement of time or memory. Losses, steps,
classes, modules, verdicts and exit codes are compared exactly: on the CPU
one binary's training is deterministic, so the same code gives the same
numbers. Two records of one binary must agree (check that first: it is the
calibration of the normalisation).

Uses only the standard library; any python3 runs it.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FRAGMENT_DIRS = {"base", "hardware"}

# report.json keys whose values are measurements (time, memory, the machine's
# momentary state) rather than what the run concluded.
MEASURED_KEYS = re.compile(
    r"(^|_)(seconds|started_at|finished_at|date|ms|wall|elapsed|duration|rss|bytes|manifest|"
    r"throughput|per_second|timeline|timeline_omitted|ram_bytes|peak|pid|hostname|kernel|free|t|cores)($|_)"
)

TEXT_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{4}|Z)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<manifest>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(GiB|MiB|KiB|GB|MB|kB|KB|bytes|B)\b"), "<size>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|min)\b"), "<duration>"),
    (re.compile(r"\b\d+ ?min \d+ ?s\b"), "<duration>"),
    # How many timed steps the layout and thread measurement took depends on the clock.
    (re.compile(r"\b\d+/\d+ timed steps\b"), "<n> timed steps"),
]


def scenarios() -> list[Path]:
    found = []
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        if path.relative_to(ROOT / "scenarios").parts[0] in FRAGMENT_DIRS:
            continue
        found.append(path)
    return found


def name_of(path: Path) -> str:
    return str(path.relative_to(ROOT / "scenarios").with_suffix("")).replace(os.sep, "--")


def normalise_text(text: str, paths: dict[str, str]) -> str:
    for real, token in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, token)
    for pattern, token in TEXT_RULES:
        text = pattern.sub(token, text)
    lines = []
    timed_table = False
    for line in text.splitlines():
        # Markdown tables: the memory-per-step table's cells and the last
        # column of a table headed "seconds" are measurements.
        if not line.startswith("|"):
            timed_table = False
        elif line.rstrip().endswith("| seconds |"):
            timed_table = True
        elif timed_table and not line.startswith("|---"):
            line = re.sub(r"\| *[0-9.]+ *\|$", "| <seconds> |", line.rstrip())
        if line.startswith("|") and re.search(r"<size>|<duration>", line):
            line = re.sub(r"\| *[0-9.]+ *(?=\|)", "| <n> ", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def normalise_json(value: Any, paths: dict[str, str], key: str = "") -> Any:
    if key and MEASURED_KEYS.search(key):
        return "<measured>"
    if isinstance(value, dict):
        return {k: normalise_json(v, paths, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [normalise_json(v, paths) for v in value]
    if isinstance(value, str):
        return normalise_text(value, paths).rstrip("\n")
    return value


def record(dbh: Path, out: Path, only: list[str]) -> int:
    if out.exists() and any(out.iterdir()):
        print(f"compare-outputs: {out} is not empty; pick a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    selected = [s for s in scenarios() if not only or name_of(s) in only]
    (out / "dbh").write_text(f"{dbh}\n")
    for path in selected:
        name = name_of(path)
        runs = out / "runs"
        run_dir = runs / name
        env = dict(os.environ, DBH_CACHE_DIR=str(out / "cache" / name))
        print(f"  {name} ...", flush=True)
        proc = subprocess.run(
            [str(dbh), "run", str(path), "--out", str(run_dir)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800,
        )
        (runs / f"{name}.exit_code").write_text(f"{proc.returncode}\n")
        (runs / f"{name}.stdout").write_text(proc.stdout)
        (runs / f"{name}.stderr").write_text(proc.stderr)
        print(f"    exit {proc.returncode}", flush=True)
    shutil.rmtree(out / "cache", ignore_errors=True)
    return normalise(out)


def normalise(out: Path) -> int:
    """Writes OUT/<name>/ from the raw outputs under OUT/runs/ (again, after a rule changed)."""
    dbh = (out / "dbh").read_text().strip()
    for code in sorted((out / "runs").glob("*.exit_code")):
        name = code.name[: -len(".exit_code")]
        run_dir = out / "runs" / name
        paths = {str(run_dir): "<out>", str(out): "<record>", dbh: "<dbh>", str(ROOT): "<repo>"}
        keep = out / name
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir()
        (keep / "exit_code").write_text(code.read_text())
        for stream in ("stdout", "stderr"):
            raw = (out / "runs" / f"{name}.{stream}").read_text()
            (keep / stream).write_text(normalise_text(raw, paths))
        report_json = run_dir / "report.json"
        if report_json.exists():
            data = normalise_json(json.loads(report_json.read_text()), paths)
            (keep / "report.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        report_md = run_dir / "report.md"
        if report_md.exists():
            (keep / "report.md").write_text(normalise_text(report_md.read_text(), paths))
    return 0


def diff(before: Path, after: Path, again: Path | None = None) -> int:
    """Compares BEFORE with AFTER. With AGAIN (a second record of BEFORE's
    binary), a file that differs between BEFORE and AGAIN varies from run to
    run of one binary: it is listed, not counted."""
    differences, varying = 0, []
    names = sorted({p.name for side in (before, after) for p in side.iterdir()
                    if p.is_dir() and p.name not in ("runs", "cache")})
    for name in names:
        for part in ("exit_code", "stdout", "stderr", "report.json", "report.md"):
            a, b = before / name / part, after / name / part
            ta = a.read_text() if a.exists() else "<missing>\n"
            tb = b.read_text() if b.exists() else "<missing>\n"
            if ta == tb:
                continue
            if again is not None and (again / name / part).exists() and (again / name / part).read_text() != ta:
                varying.append(f"{name}/{part}")
                continue
            differences += 1
            sys.stdout.writelines(difflib.unified_diff(
                ta.splitlines(keepends=True), tb.splitlines(keepends=True),
                f"before/{name}/{part}", f"after/{name}/{part}", n=1))
    for v in varying:
        print(f"compare-outputs: {v} differs, but also between two records of the first binary (varies run to run)")
    print(f"compare-outputs: {len(names)} scenarios, {differences} file(s) differ")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("dbh", type=Path)
    rec.add_argument("out", type=Path)
    rec.add_argument("--only", nargs="*", default=[])
    nor = sub.add_parser("normalise")
    nor.add_argument("out", type=Path)
    dif = sub.add_parser("diff")
    dif.add_argument("before", type=Path)
    dif.add_argument("after", type=Path)
    dif.add_argument("--again", type=Path, default=None,
                     help="a second record of BEFORE's binary: what differs between the two varies run to run")
    args = parser.parse_args()
    if args.command == "record":
        return record(args.dbh.resolve(), args.out.resolve(), args.only)
    if args.command == "normalise":
        return normalise(args.out.resolve())
    return diff(args.before, args.after, args.again)


if __name__ == "__main__":
    sys.exit(main())
