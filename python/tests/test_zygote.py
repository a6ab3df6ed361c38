"""The warm worker (dbh_adapter._zygote): its request and import reading, and
a real zygote serving trials to a supervisor that is their subreaper, as dbh
is (Note [A warm worker])."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dbh_adapter import _zygote

PYTHON_DIR = Path(__file__).resolve().parent.parent


def test_a_request_is_read_and_each_bad_field_is_named() -> None:
    r = _zygote.parse_request(b'{"argv": ["t.py", "--lr", "1"], "env": {"A": "1"}, "cwd": "/tmp"}')
    assert r == _zygote.TrialRequest(argv=["t.py", "--lr", "1"], env={"A": "1"}, cwd="/tmp")
    for data, field in [
        (b"[1]", "request"),
        (b"\xff", "request"),
        (b'{"argv": [], "env": {}, "cwd": "/"}', "request.argv"),
        (b'{"argv": ["t.py", 3], "env": {}, "cwd": "/"}', "request.argv"),
        (b'{"argv": ["t.py"], "env": {"A": 1}, "cwd": "/"}', "request.env"),
        (b'{"argv": ["t.py"], "env": {}, "cwd": ""}', "request.cwd"),
    ]:
        with pytest.raises(ValueError, match=field.replace(".", r"\.") + ":"):
            _zygote.parse_request(data)


def test_the_imports_read_are_the_top_level_ones() -> None:
    source = textwrap.dedent(
        """
        import os, json as j
        from collections import abc
        from . import sibling
        try:
            import tomllib
        except ImportError:
            import tomli
        if True:
            import csv
        def f():
            import sqlite3
        import os
        """
    )
    assert _zygote.imports_of(source) == ["os", "json", "collections", "tomllib", "tomli", "csv"]


def test_the_trainings_own_modules_are_not_installed_ones(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("")
    assert _zygote.is_installed("json", str(tmp_path))
    assert _zygote.is_installed("sys", str(tmp_path))  # built in
    assert not _zygote.is_installed("no_such_module_anywhere", str(tmp_path))
    sys.path.insert(0, str(tmp_path))
    try:
        assert not _zygote.is_installed("mine", str(tmp_path))
    finally:
        sys.path.remove(str(tmp_path))


def test_the_arguments_name_a_script_or_a_module() -> None:
    assert _zygote.parse_arguments(["--socket", "4", "train.py"]) == (4, _zygote.Target(script="train.py"))
    assert _zygote.parse_arguments(["--socket", "4", "-m", "pkg.train"]) == (4, _zygote.Target(module="pkg.train"))
    for bad in [[], ["--socket", "x", "t.py"], ["t.py"], ["--socket", "4", "-m"], ["--socket", "4", "a.py", "b"]]:
        with pytest.raises(ValueError, match="usage"):
            _zygote.parse_arguments(bad)


def test_an_exit_status_is_the_one_python_exits_with(capsys: pytest.CaptureFixture[str]) -> None:
    assert _zygote.exit_code_of(SystemExit()) == 0
    assert _zygote.exit_code_of(SystemExit(7)) == 7
    assert _zygote.exit_code_of(SystemExit("no data")) == 1
    assert "no data" in capsys.readouterr().err


# The supervisor's side, as dbh plays it: a subreaper that starts the zygote
# with one end of a SOCK_SEQPACKET pair, sends each trial's request with its
# four descriptors, waits for the pid the zygote answers as for a child of its
# own, and reads the trial's stdout, stderr and events.
SUPERVISOR = r"""
import ctypes, json, os, socket, subprocess, sys

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
script, folder, requests = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
env = dict(os.environ, DBH_SUPERVISOR_PID=str(os.getpid()))
zygote = subprocess.Popen([sys.executable, "-m", "dbh_adapter._zygote", "--socket", str(theirs.fileno()), script],
                          pass_fds=[theirs.fileno()], env=env)
theirs.close()


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks).decode()
        chunks.append(b)


results = []
for request in requests:
    request["env"]["DBH_SUPERVISOR_PID"] = str(os.getpid())
    pipes = [os.pipe() for _ in range(3)]
    null = os.open(os.devnull, os.O_RDONLY)
    ends = [null] + [w for _, w in pipes]
    sent = ends[:2] if request.pop("short", False) else ends
    socket.send_fds(ours, [json.dumps(request).encode()], sent)
    for fd in ends:
        os.close(fd)
    reply = json.loads(ours.recv(4096))
    if "pid" in reply:
        pid = reply["pid"]
        texts = [read_all(r) for r, _ in pipes]
        waited, status = os.waitpid(pid, 0)
        reply.update(code=os.waitstatus_to_exitcode(status), waited=waited == pid, out=texts[0], err=texts[1],
                     events=texts[2])
    else:
        for r, _ in pipes:
            os.close(r)
    results.append(reply)
ours.close()
results.append({"zygote": zygote.wait(timeout=30)})
print(json.dumps(results))
"""

TRAINING = r"""
import json
import os
import random
import sys

with open(3, "w") as events:
    events.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "mine": os.environ.get("MINE"),
                             "leaked": os.environ.get("ONLY_FIRST"), "draw": random.random(),
                             "name": __name__, "pid": os.getpid(), "ppid": os.getppid(),
                             "group": os.getpgid(0), "preloaded_json": "json" in sys.modules}) + "\n")
print("to stdout")
print("to stderr", file=sys.stderr)
import helper
sys.exit(int(sys.argv[1]))
"""


def serve(tmp_path: Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    training = tmp_path / "training"
    training.mkdir(exist_ok=True)
    (training / "train.py").write_text(TRAINING)
    # The training's own module: never imported by the zygote (it writes a
    # file when imported), only by each trial.
    (training / "helper.py").write_text("open('imported', 'a').write('x')\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISOR, str(training / "train.py"), str(tmp_path), json.dumps(requests)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def test_a_zygote_forks_each_trial_as_a_child_of_its_supervisor(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    script = str(tmp_path / "training" / "train.py")
    results = serve(tmp_path, [
        {"argv": [script, "7", "--lr", "0.5"], "env": {"MINE": "one", "ONLY_FIRST": "1"}, "cwd": str(first)},
        {"argv": [script, "0"], "env": {"MINE": "two"}, "cwd": str(second)},
    ])
    one, two, end = results
    assert end == {"zygote": 0}  # it ends when the supervisor closes its end
    for trial, code, cwd, mine in [(one, 7, first, "one"), (two, 0, second, "two")]:
        assert trial["waited"], trial  # the supervisor waited for it: its child
        assert trial["code"] == code
        assert trial["out"] == "to stdout\n" and trial["err"] == "to stderr\n"
        seen = json.loads(trial["events"])
        assert seen["name"] == "__main__" and seen["cwd"] == str(cwd) and seen["mine"] == mine
        assert seen["argv"][0] == script and seen["argv"][1] == str(code)
        assert seen["group"] == seen["pid"] and seen["pid"] == trial["pid"]  # its own process group
        assert seen["preloaded_json"]
        assert (cwd / "imported").read_text() == "x"  # its own module, imported by the trial, in its folder
    assert json.loads(one["events"])["leaked"] == "1" and json.loads(two["events"])["leaked"] is None
    assert json.loads(one["events"])["draw"] != json.loads(two["events"])["draw"]  # reseeded, as a fresh process
    assert not (tmp_path / "training" / "imported").exists()  # the zygote never imported it


def test_a_request_without_its_descriptors_is_answered_with_an_error(tmp_path: Path) -> None:
    script = str(tmp_path / "training" / "train.py")
    results = serve(tmp_path, [
        {"argv": [script, "0"], "env": {}, "cwd": str(tmp_path), "short": True},
        {"argv": [script, "3"], "env": {}, "cwd": str(tmp_path)},
    ])
    assert results[0] == {"error": "request: expected 4 descriptors, got 2"}
    assert results[1]["code"] == 3  # the zygote goes on serving
