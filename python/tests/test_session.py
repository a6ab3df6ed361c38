"""A plain PyTorch loop under the adapter (_session.py, _loop.py, _frame.py):
the events of docs/events.md, in order, with their fields."""

from __future__ import annotations

import os

import re
import subprocess
from typing import Any

import pytest
import torch

import dbh_adapter
from dbh_adapter import DbhAdapterError, KeyNotApplied, float_bits
from dbh_adapter._protocol import env_rank
from fakes import PYTHON, Squares, TinyNet, batches, of, run_forked, subprocess_env, train_plain, types


def test_inactive_session_passes_everything_through_and_writes_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    dbh = dbh_adapter.connect({})
    assert not dbh.active
    data = Squares(3)
    assert dbh.dataset(data) is data
    assert dbh.lightning_callbacks() == []
    assert dbh.resume_path() is None and dbh.max_steps is None and dbh.seed is None
    model = train_plain(dbh, steps=3)
    reference = train_plain(dbh_adapter.connect({}), steps=3)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    assert not dbh.finished and dbh.step == -1
    assert capfd.readouterr().out == ""


def test_a_plain_loop_writes_the_protocols_events_in_order(supervisor: Any,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    sup = supervisor()
    dbh = sup.connect()
    assert dbh.active and dbh.max_steps == 4 and dbh.seed == 0
    train_plain(dbh, steps=4)
    events = sup.events()
    assert types(events) == ["hello", "run_begin"] + ["step_begin", "batch", "step_end"] * 4 + ["run_end", "done"]
    hello = events[0]
    assert hello["schema_version"] == 1 and hello["scenario_hash"] == "0123456789abcdef"
    assert hello["scenario"] == "adapter-test" and hello["trial"] == 0 and hello["seed"] == 0
    assert hello["worker"].startswith(f"dbh-adapter {dbh_adapter.__version__} (pytorch, torch ")
    assert hello["modules"] == ["stem", "body", "body.0", "body.1", "head"]
    assert {"loss_bits", "subset", "monitors.finite", "fault:nan_activation"} <= set(hello["capabilities"])
    environment = hello["environment"]
    assert environment["python"].startswith("3.") and environment["torch"] == torch.__version__
    assert environment["device"] == "cpu" and "lightning" not in environment
    assert all(isinstance(v, str) and v for v in environment.values())
    assert [e["step"] for e in of(events, "step_begin")] == [0, 1, 2, 3]
    assert of(events, "batch")[1]["samples"] == ["s4", "s5", "s6", "s7"]
    for end in of(events, "step_end"):
        assert end["run"] == 0 and end["samples"] == 4 and end["lr"] == 0.05
        assert end["loss_bits"] == float_bits(end["loss"]) and end["micro_loss_bits"] == [end["loss_bits"]]
        assert end["skipped"] is False and end["loss_scale"] == 1.0 and end["seconds"] >= 0
        assert end["memory"]["rss_bytes"] > 0
    run_end = of(events, "run_end")[0]
    assert run_end["steps"] == 4 and re.fullmatch(r"[0-9a-f]{16}", run_end["checksum"])
    assert set(run_end["resources"]) == {"open_files", "threads", "children"}
    assert run_end["resources"]["open_files"] > 0 and run_end["resources"]["threads"] >= 1
    assert events[-1]["status"] == "passed"
    assert all(isinstance(e["t"], float) for e in events)
    assert capfd.readouterr().out == ""  # nothing on the user's stdout


def test_step_end_leaves_out_what_the_adapter_does_not_measure(supervisor: Any) -> None:
    sup = supervisor(monitors={"mode": "off"}, train={"max_steps": 2})
    train_plain(sup.connect(), steps=2)
    for end in of(sup.events(), "step_end"):
        assert not {"bce", "l1", "dice", "grad_norm", "grad_norm_bits"} & set(end)
        assert "lr" in end and "loss_bits" in end


@pytest.mark.parametrize("mode", ["cheap", "localise"])
def test_grad_norm_is_the_total_gradient_norm_with_the_monitors_on(supervisor: Any, mode: str) -> None:
    sup = supervisor(monitors={"mode": mode}, train={"max_steps": 3})
    expected: list[float] = []

    def before_step(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        expected.append(float(torch.nn.utils.get_total_norm(grads)))

    train_plain(sup.connect(), steps=3, on_step=before_step)
    ends = of(sup.events(), "step_end")
    assert len(ends) == 3
    for end, want in zip(ends, expected):
        assert "bce" not in end and "l1" not in end and "dice" not in end
        assert end["grad_norm"] == pytest.approx(want, rel=1e-6)
        assert end["grad_norm"] > 0
        assert end["grad_norm_bits"] == float_bits(end["grad_norm"])


def test_resources_count_the_processes_children() -> None:
    from dbh_adapter._environment import resources
    before = resources()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert resources()["children"] == before["children"] + 1
    finally:
        child.kill()
        child.wait()


def test_two_identical_runs_have_equal_loss_bits_and_checksums(supervisor: Any) -> None:
    runs = []
    for _ in range(2):
        sup = supervisor()
        train_plain(sup.connect(), steps=4)
        runs.append(sup.events())
    bits = [[e["loss_bits"] for e in of(r, "step_end")] for r in runs]
    assert len(bits[0]) == 4 and bits[0] == bits[1]
    assert of(runs[0], "run_end")[0]["checksum"] == of(runs[1], "run_end")[0]["checksum"]


def test_stop_after_ends_the_run_early_with_the_schedule_unchanged(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 6, "stop_after": 2})
    dbh = sup.connect()
    assert dbh.max_steps == 6 and dbh.last_step == 2
    train_plain(dbh, steps=6)
    events = sup.events()
    assert [e["step"] for e in of(events, "step_end")] == [0, 1]
    assert of(events, "run_end")[0]["steps"] == 2 and events[-1]["status"] == "passed"


def test_a_max_steps_that_did_not_reach_the_script_raises_key_not_applied(supervisor: Any) -> None:
    sup = supervisor(train={"max_steps": 4})
    with pytest.raises(KeyNotApplied) as caught:
        train_plain(sup.connect(), steps=7)
    assert isinstance(caught.value, DbhAdapterError) and isinstance(caught.value, RuntimeError)
    assert caught.value.key == "train.max_steps" and caught.value.want == 4 and caught.value.got == 7
    events = sup.events()
    assert types(events) == ["hello", "run_begin", "error", "done"]  # one error, written before the raise
    assert events[2]["kind"] == "harness" and "train.max_steps is 4" in events[2]["message"]
    assert events[3]["status"] == "error"


def test_an_exception_in_the_loop_is_an_error_of_its_step(supervisor: Any) -> None:
    sup = supervisor()

    def boom(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if step == 2:
            raise RuntimeError("out of patience")

    with pytest.raises(RuntimeError, match="out of patience"):
        train_plain(sup.connect(), steps=4, on_step=boom)
    events = sup.events()
    error = of(events, "error")[0]
    assert error["kind"] == "exception" and error["step"] == 2 and error["phase"] == "train"
    assert error["message"] == "RuntimeError: out of patience" and "boom" in error["backtrace"]
    assert "sample" not in error
    assert events[-1]["type"] == "done" and events[-1]["status"] == "error"
    assert "run_end" not in types(events)


def test_a_launch_of_several_ranks_is_refused_by_name_in_every_rank(supervisor: Any) -> None:
    # A rank a launcher started (its parent is not dbh): refused, never ended
    # silently, and nothing written on the trial's stream.
    other = supervisor(env={"WORLD_SIZE": "2", "RANK": "1"})
    with pytest.raises(dbh_adapter.NotSupported, match=r"a launch of 2 ranks \(this is rank 1\) is not supported"):
        other.connect()
    assert other.raw() == b""
    # The process dbh started says so to dbh: the trial is unresolved, with why.
    first = supervisor(env={"WORLD_SIZE": "2", "RANK": "0", "DBH_SUPERVISOR_PID": str(os.getppid())})
    with pytest.raises(dbh_adapter.NotSupported):
        first.connect()
    events = first.events()
    assert types(events) == ["error", "done"]
    assert events[0]["kind"] == "harness" and "devices=1" in events[0]["message"]


@pytest.mark.parametrize(("environ", "want"), [
    ({}, 0), ({"WORLD_SIZE": "1", "RANK": "3"}, 0), ({"WORLD_SIZE": "4", "RANK": "3"}, 3),
    ({"WORLD_SIZE": "4", "LOCAL_RANK": "2"}, 2), ({"WORLD_SIZE": "x", "RANK": "1"}, 0)])
def test_the_rank_comes_from_the_launchers_environment(environ: dict[str, str], want: int) -> None:
    assert env_rank(environ) == want


_DESCRIBE = """
import dbh_adapter
from fakes import TinyNet
dbh = dbh_adapter.connect()
dbh.watch(TinyNet())
raise SystemExit(5)  # not reached: describe mode ends the process with 0
"""


def test_describe_mode_writes_hello_and_done_and_exits_0(supervisor: Any) -> None:
    sup = supervisor()
    env = subprocess_env({**sup.env, "DBH_WORKER_DESCRIBE": "1"})
    done = subprocess.run([PYTHON, "-c", _DESCRIBE], env=env, pass_fds=(sup.write_fd,), capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b""
    events = sup.events()
    assert types(events) == ["hello", "done"]
    assert events[1]["status"] == "described"
    assert "fault:lr_spike" in events[0]["capabilities"] and "body.0" in events[0]["modules"]


def _describe(env: dict[str, str]) -> None:
    dbh_adapter.connect(env).watch(TinyNet())
    raise SystemExit(5)  # not reached


def test_describe_mode_of_several_ranks_tells_dbh_why_it_cannot_train(supervisor: Any) -> None:
    sup = supervisor(env={"DBH_WORKER_DESCRIBE": "1", "WORLD_SIZE": "2", "RANK": "0",
                          "DBH_SUPERVISOR_PID": str(os.getpid())})
    assert run_forked(_describe, sup.env) != 0
    events = sup.events()
    assert types(events) == ["error", "done"] and "not supported yet" in events[0]["message"]


def test_the_session_is_typed_as_the_readme_uses_it() -> None:
    dbh: dbh_adapter.Session = dbh_adapter.connect({})
    with dbh as same:
        assert same is dbh
        model = TinyNet()
        assert dbh.watch(model) is model
        assert [s for s, _ in dbh.steps(batches(3), max_steps=2)] == [0, 1]


def test_runs_train_repeat_in_process_times_each_between_its_run_begin_and_run_end(supervisor: Any) -> None:
    sup = supervisor(repeat={"in_process": 3}, train={"max_steps": 2},
                     faults=[{"name": "leak", "at_step": 0, "bytes": "8MiB"}])
    dbh = sup.connect()
    seen = []
    with dbh:
        for run in dbh.runs():
            seen.append(run)
            train_plain(dbh, steps=2)
    events = sup.events()
    assert seen == [0, 1, 2]
    assert "in_process_runs" in events[0]["capabilities"] and "fault:leak" in events[0]["capabilities"]
    assert [(e["type"], e["run"]) for e in events if e["type"] in ("run_begin", "run_end")] == [
        ("run_begin", 0), ("run_end", 0), ("run_begin", 1), ("run_end", 1), ("run_begin", 2), ("run_end", 2)]
    assert [(e["run"], e["step"]) for e in of(events, "step_end")] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    # The leak retained its bytes once per run, where the model is.
    fired = of(events, "fault_fired")
    assert [(e["run"], e["detail"]["bytes"], e["detail"]["device"]) for e in fired] == [
        (r, 8 * 2**20, "cpu") for r in range(3)]
    assert types(events)[-1] == "done" and events[-1]["status"] == "passed"
    assert all(set(e["resources"]) == {"open_files", "threads", "children"} for e in of(events, "run_end"))


def test_runs_outside_dbh_is_one_run() -> None:
    assert list(dbh_adapter.connect({}).runs()) == [0]


def test_an_error_in_a_later_run_ends_the_trial_there(supervisor: Any) -> None:
    sup = supervisor(repeat={"in_process": 3}, train={"max_steps": 2})
    dbh = sup.connect()

    def second_run_fails(step: int, model: Any, optimizer: Any) -> None:
        if dbh.run == 1 and step == 1:
            raise RuntimeError("fails on the second run")

    with pytest.raises(RuntimeError, match="second run"):
        for _ in dbh.runs():
            train_plain(dbh, steps=2, on_step=second_run_fails)
    events = sup.events()
    assert [e["run"] for e in of(events, "run_end")] == [0]
    error = of(events, "error")[0]
    assert error["run"] == 1 and error["step"] == 1 and error["message"] == "RuntimeError: fails on the second run"
    assert events[-1]["type"] == "done" and events[-1]["status"] == "error"
