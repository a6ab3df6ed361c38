"""The command line a training parsed (`hello`'s `options`, _parser.py) and a
script that fits once run again for repeat.in_process (_reruns.py), each in
a child Python under a fake supervisor: what dbh reads of them."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

from dbh_adapter._parser import parser_options
from fakes import PYTHON, of, subprocess_env, types

_SCRIPT = """
import argparse, sys
import dbh_adapter
from fakes import TinyNet, batches, train_plain
ap = argparse.ArgumentParser()
ap.add_argument("images")
ap.add_argument("--batch-size", "-b", type=int, default=4)
ap.add_argument("--no-shuffle", dest="shuffle", action="store_false")
ap.add_argument("--amp", action="store_true")
ap.add_argument("--steps", type=int, default=4)
args = ap.parse_args()
train_plain(dbh_adapter.connect(), steps=args.steps)
print("fitted", flush=True)
"""


def test_parser_options_name_each_destination_and_how_it_is_written() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("exp")
    ap.add_argument("--lr", "-l", type=float)
    ap.add_argument("--tags", nargs="+")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--no-shuffle", dest="shuffle", action="store_false")
    ap.add_argument("--verbose", "-v", action="count")
    got = {o["dest"]: o for o in parser_options(ap)}
    assert set(got) == {"exp", "lr", "tags", "amp", "shuffle"}  # help and count take no value word
    assert got["exp"] == {"dest": "exp", "strings": [], "kind": "positional", "nargs": 1}
    assert got["lr"]["strings"] == ["--lr", "-l"] and got["lr"]["kind"] == "value"
    assert got["tags"]["nargs"] == -1
    assert got["amp"]["kind"] == "on" and got["shuffle"]["kind"] == "off"


def _run(sup: Any, script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-c", script, *args], env=subprocess_env(sup.env), pass_fds=(sup.write_fd,),
                          capture_output=True, timeout=180)


def test_hello_reports_the_parser_and_what_it_parsed(supervisor: Any) -> None:
    sup = supervisor()
    done = _run(sup, _SCRIPT, "imgs", "-b", "2", "--no-shuffle")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    hello = of(sup.events(), "hello")[0]
    options = {o["dest"]: o for o in hello["options"]}
    assert options["batch_size"]["strings"] == ["--batch-size", "-b"]
    assert options["images"]["kind"] == "positional"
    assert hello["config"]["batch_size"] == 2 and hello["config"]["shuffle"] is False
    assert hello["config"]["images"] == "imgs"


def test_a_script_that_fits_once_is_run_again_in_the_same_process(supervisor: Any) -> None:
    sup = supervisor(repeat={"in_process": 3})
    script = Path(sup.trial_dir).parent / "train.py"
    script.write_text(_SCRIPT)
    done = subprocess.run([PYTHON, str(script), "imgs"], env=subprocess_env(sup.env),
                          pass_fds=(sup.write_fd,), capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().count("fitted") == 3
    events = sup.events()
    assert types(events).count("hello") == 1 and types(events).count("done") == 1
    assert [e["run"] for e in of(events, "run_end")] == [0, 1, 2]
    assert "in_process_runs" in of(events, "hello")[0]["capabilities"]
    assert of(events, "done")[0]["status"] == "passed"


def test_a_run_that_exits_with_an_error_ends_the_process_with_its_code(supervisor: Any) -> None:
    sup = supervisor(repeat={"in_process": 2})
    script = Path(sup.trial_dir).parent / "train.py"
    script.write_text("import sys\nimport dbh_adapter\nsys.exit(3)\n")
    done = subprocess.run([PYTHON, str(script)], env=subprocess_env(sup.env), pass_fds=(sup.write_fd,),
                          capture_output=True, timeout=180)
    assert done.returncode == 3


def test_the_largest_configuration_and_parser_fit_dbhs_line_bound() -> None:
    from dbh_adapter._config import MAX_KEYS, MAX_TEXT, flatten_config
    from dbh_adapter._events import MAX_EVENT_LINE_BYTES, fit_in_line
    from dbh_adapter._parser import MAX_OPTIONS, MAX_STRING, MAX_STRINGS

    config = flatten_config({f"section{i}.key{i}": "x" * (MAX_TEXT + 10) for i in range(MAX_KEYS + 10)})
    options = [{"dest": "d" * MAX_STRING, "strings": ["-" + "s" * (MAX_STRING - 1)] * MAX_STRINGS, "kind": "value",
                "nargs": 1}] * MAX_OPTIONS
    fields = {"modules": ["m" * 100] * 2000}
    kept, kept_options = fit_in_line(fields, config, options)
    import json
    line = json.dumps({"type": "hello", "t": 1.0, **fields, "config": kept, "options": kept_options},
                      separators=(",", ":"))
    assert len(line) + 1 <= MAX_EVENT_LINE_BYTES
    assert kept and kept_options  # cut, not dropped
    assert list(kept) == list(config)[:len(kept)]


def test_a_configuration_value_nested_past_dbhs_depth_is_left_out() -> None:
    from dbh_adapter._events import MAX_EVENT_DEPTH, fit_in_line, nesting

    deep: object = 1
    for _ in range(100000):  # far past Python's recursion limit: counted iteratively
        deep = [deep]
    assert nesting(deep) == MAX_EVENT_DEPTH + 1
    fits: object = 1
    for _ in range(MAX_EVENT_DEPTH - 2):
        fits = {"k": fits}
    kept, _ = fit_in_line({}, {"deep": deep, "fits": fits, "lr": 0.1}, None)
    assert list(kept) == ["fits", "lr"]
