"""The link to dbh (_protocol.py) and the event writer (_events.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import dbh_adapter
from dbh_adapter import DbhAdapterError, ProtocolError, under_dbh
from dbh_adapter._events import EventWriter
from dbh_adapter._protocol import SUPERVISOR_GONE_EXIT, Link
from fakes import run_forked


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_under_dbh_is_the_protocol_variable() -> None:
    assert under_dbh({"DBH_WORKER_PROTOCOL": "1"})
    assert not under_dbh({}) and not under_dbh({"DBH_WORKER_PROTOCOL": ""})


@pytest.mark.parametrize(("change", "message"), [
    ({"DBH_WORKER_PROTOCOL": "2"}, "DBH_WORKER_PROTOCOL: expected 1 (this adapter's worker protocol), got '2'"),
    ({"DBH_EVENT_FD": "three"}, "DBH_EVENT_FD: expected the event pipe's descriptor, got 'three'"),
    ({"DBH_EVENT_FD": "999"}, "DBH_EVENT_FD: expected an open descriptor, got 999"),
    ({"DBH_SCENARIO": "/nonexistent.json"}, "DBH_SCENARIO: expected the resolved scenario (a JSON file), got "
                                            "'/nonexistent.json'"),
    ({"DBH_TRIAL_DIR": "/nonexistent"}, "DBH_TRIAL_DIR: expected the trial's folder, got '/nonexistent'"),
    ({"DBH_TRIAL": "x"}, "DBH_TRIAL: expected the trial's index, got 'x'"),
])
def test_an_environment_that_is_not_the_protocols_raises_protocol_error(supervisor: Any, change: dict[str, str],
                                                                        message: str) -> None:
    sup = supervisor()
    with pytest.raises(ProtocolError) as caught:
        dbh_adapter.connect({**sup.env, **change})
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, DbhAdapterError)


def test_the_link_reads_the_scenario_and_the_trial(supervisor: Any) -> None:
    sup = supervisor(env={"DBH_TRIAL": "3"}, train={"seed": 7})
    link = Link(sup.env)
    assert link.trial == 3 and link.section("train")["seed"] == 7 and link.section("nope") == {}
    assert link.scenario_hash == "0123456789abcdef" and not link.describe and link.trial_dir == str(sup.trial_dir)


def test_an_event_is_one_line_without_its_none_fields() -> None:
    r, w = os.pipe()
    writer = EventWriter(w)
    writer.emit("step_end", step=3, loss=float("nan"), grad_norm=None, memory={"rss_bytes": 1})
    writer.muted = True
    writer.emit("step_end", step=4)
    os.close(w)
    lines = _read_all(r).decode().splitlines()
    os.close(r)
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "step_end" and event["step"] == 3 and "grad_norm" not in event
    assert "loss" not in event and event["memory"] == {"rss_bytes": 1} and event["t"] >= 0  # NaN: left out


def _write_after_reader_gone(fd: int) -> None:
    EventWriter(fd).emit("heartbeat", step=1)
    os._exit(0)  # not reached: the writer ends the process


def test_the_main_process_ends_when_the_supervisor_is_gone() -> None:
    r, w = os.pipe()
    os.close(r)
    assert run_forked(_write_after_reader_gone, w) == SUPERVISOR_GONE_EXIT
    os.close(w)


def _emit_in_child(writer: EventWriter) -> None:
    writer.emit("sample_read", index=1)
    writer.emit("sample_read", index=2)
    os._exit(0)


def test_another_process_goes_quiet_when_the_supervisor_is_gone() -> None:
    r, w = os.pipe()
    writer = EventWriter(w)
    os.close(r)
    assert run_forked(_emit_in_child, writer) == 0  # a loader worker does not end itself
    os.close(w)


def _emit_into_a_reused_descriptor(writer: EventWriter, other_w: int) -> None:
    os.dup2(other_w, writer.fd)  # the number now names another pipe, as in a spawned process
    writer.emit("sample_read", index=1)
    os._exit(0)


def test_another_process_writes_only_to_the_pipe_the_writer_was_made_for() -> None:
    r, w = os.pipe()
    other_r, other_w = os.pipe()
    writer = EventWriter(w)
    assert run_forked(_emit_into_a_reused_descriptor, writer, other_w) == 0
    assert run_forked(_emit_in_child, writer) == 0  # the descriptor unchanged: reports
    os.close(w)
    os.close(other_w)
    assert _read_all(other_r) == b""
    assert [json.loads(line)["index"] for line in _read_all(r).decode().splitlines()] == [1, 2]
    os.close(r)
    os.close(other_r)


def _connect(env: dict[str, str]) -> None:
    dbh_adapter.connect(env)
    raise SystemExit(0)  # not reached


def test_a_process_whose_supervisor_is_gone_exits_at_once(supervisor: Any) -> None:
    sup = supervisor()
    assert run_forked(_connect, {**sup.env, "DBH_SUPERVISOR_PID": str(os.getppid())}) == SUPERVISOR_GONE_EXIT
    assert run_forked(_connect, {**sup.env, "DBH_SUPERVISOR_PID": str(os.getpid())}) == 0  # its parent: it goes on
    assert sup.raw() == b""


def test_non_finite_numbers_are_never_written_as_invalid_json(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    frame = dbh.frame
    assert frame is not None
    frame.events.emit("step_end", run=0, step=0, loss=float("nan"), grad_norm=float("inf"), grad_norm_bits=2139095040,
                      stats={"min": float("-inf"), "values": [1.0, float("nan")]})
    (event,) = sup.events()  # json.loads of a line with NaN or Infinity would be another JSON than dbh reads
    assert "loss" not in event and "grad_norm" not in event and event["grad_norm_bits"] == 2139095040
    assert event["stats"] == {"min": None, "values": [1.0, None]}
