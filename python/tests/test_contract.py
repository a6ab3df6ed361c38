"""The constants the adapter shares with dbh's C++ side (_protocol.py) are the
ones the C++ sources declare: this test reads them (a regular expression over
each declaration) and fails when either side changes alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dbh_adapter import _protocol as contract

REPO = Path(__file__).resolve().parents[2]


def _source(relative: str) -> str:
    path = REPO / relative
    if not path.is_file():
        pytest.fail(f"{relative}: expected dbh's C++ source beside the adapter (python/ of a dbh checkout)")
    return path.read_text(encoding="utf-8")


def _int_constant(relative: str, name: str) -> int:
    """`inline constexpr <type> <name> = <a> [+ <b>];` in `relative`, evaluated."""
    m = re.search(rf"constexpr\s+[\w:]+\s+{name}\s*=\s*([0-9+\s]+);", _source(relative))
    assert m, f"{relative}: no integer constant {name}"
    return sum(int(term) for term in m.group(1).split("+"))


def _string_constant(text: str, name: str) -> str:
    m = re.search(rf"constexpr\s+const\s+char\s*\*\s*{name}\s*=\s*\"([^\"]*)\";", text)
    assert m, f"no string constant {name}"
    return m.group(1)


@pytest.mark.parametrize(("python", "relative", "cpp"), [
    ("PROTOCOL_VERSION", "harness/supervisor/worker_contract.h", "kWorkerProtocolVersion"),
    ("EVENT_SCHEMA_VERSION", "harness/proto/events.h", "kEventSchemaVersion"),
    ("SUPERVISOR_GONE_EXIT", "harness/proto/worker_link.h", "kSupervisorGoneExit"),
    ("SCALER_SKIP_LIMIT", "harness/proto/event_types.h", "kScalerSkipLimit"),
])
def test_numbers_match_the_cpp_side(python: str, relative: str, cpp: str) -> None:
    assert getattr(contract, python) == _int_constant(relative, cpp)


def test_environment_variables_match_the_cpp_side() -> None:
    header = _source("harness/supervisor/worker_contract.h")
    block = re.search(r"namespace worker_env \{(.*?)\}", header, re.S)
    assert block, "worker_contract.h: no namespace worker_env"
    pairs = {
        "ENV_PROTOCOL": "kProtocol", "ENV_EVENT_FD": "kEventFd", "ENV_SCENARIO": "kScenario",
        "ENV_SCENARIO_HASH": "kScenarioHash", "ENV_TRIAL_DIR": "kTrialDir", "ENV_TRIAL": "kTrial",
        "ENV_DESCRIBE": "kDescribe",
    }
    for python, cpp in pairs.items():
        assert getattr(contract, python) == _string_constant(block.group(1), cpp), python
    declared = set(re.findall(r"constexpr\s+const\s+char\s*\*\s*(k\w+)\s*=", block.group(1)))
    assert declared == set(pairs.values()), "worker_env has variables the adapter does not read"
    link = _source("harness/proto/worker_link.h")
    assert contract.ENV_SUPERVISOR_PID == _string_constant(link, "kSupervisorPidEnv")
    # The variables are set by worker_contract.cc from these names.
    spec = _source("harness/supervisor/worker_contract.cc")
    for cpp in ("kProtocol", "kEventFd", "kScenario", "kScenarioHash", "kTrialDir", "kTrial", "kDescribe"):
        assert f"worker_env::{cpp}" in spec, cpp


def test_the_checkpoint_name_matches_the_cpp_side() -> None:
    source = _source("harness/proto/event_types.cc")
    m = re.search(r"std::string checkpoint_file_name\(int64_t run, int64_t step\)\s*\{\s*return\s+(.*?);\s*\}",
                  source, re.S)
    assert m, "event_types.cc: no checkpoint_file_name(run, step)"
    parts = re.findall(r"\"([^\"]*)\"|std::to_string\((\w+)\)", m.group(1))
    for run, step in ((0, 5), (2, 140)):
        values = {"run": str(run), "step": str(step)}
        cpp = "".join(literal or values[name] for literal, name in parts)
        assert contract.checkpoint_file_name(run, step) == cpp


def test_the_state_name_matches_the_cpp_side() -> None:
    source = _source("harness/proto/event_types.cc")
    m = re.search(r"std::string state_file_name\(int64_t step\)\s*\{\s*return\s+(.*?);\s*\}", source, re.S)
    assert m, "event_types.cc: no state_file_name(step)"
    parts = re.findall(r"\"([^\"]*)\"|std::to_string\((\w+)\)", m.group(1))
    for step in (0, 140):
        cpp = "".join(literal or str(step) for literal, _ in parts)
        assert contract.state_file_name(step) == cpp
