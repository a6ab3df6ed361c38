"""The constants the adapter shares with dbh's C++ side (the protocol's names and
numbers, the bounds dbh reads a worker's events within) are the ones the C++
sources declare: this test reads them (a regular expression over each
declaration) and fails when either side changes alone."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from dbh_adapter import _config, _data, _events, _numerics, _parser
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


@pytest.mark.parametrize(("module", "python", "relative", "cpp"), [
    (contract, "PROTOCOL_VERSION", "harness/supervisor/worker_contract.h", "kWorkerProtocolVersion"),
    (contract, "EVENT_SCHEMA_VERSION", "harness/proto/events.h", "kEventSchemaVersion"),
    (contract, "SUPERVISOR_GONE_EXIT", "harness/proto/worker_link.h", "kSupervisorGoneExit"),
    (contract, "SCALER_SKIP_LIMIT", "harness/proto/event_types.h", "kScalerSkipLimit"),
    # The bounds dbh reads a worker's events within, which the adapter keeps.
    (_config, "MAX_KEYS", "harness/proto/event_types.h", "kMaxConfigKeys"),
    (_config, "MAX_TEXT", "harness/proto/event_types.h", "kMaxConfigValueBytes"),
    (_numerics, "MAX_MODULES", "harness/proto/event_types.h", "kMaxNumericsModules"),
    (_data, "NAME_CHARS", "harness/supervisor/outcome.h", "kMaxSampleNameBytes"),
    (_events, "MAX_EVENT_DEPTH", "harness/proto/events.h", "kMaxEventDepth"),
    (_parser, "MAX_OPTIONS", "harness/scenario/command_syntax.h", "kMaxParserOptions"),
])
def test_numbers_match_the_cpp_side(module: ModuleType, python: str, relative: str, cpp: str) -> None:
    assert getattr(module, python) == _int_constant(relative, cpp), f"{module.__name__}.{python} != {relative}: {cpp}"


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


def _table_rows(relative: str, section: str = "") -> list[list[str]]:
    """The cells of every table row of `relative` (under the heading
    `section`, when given) whose first cell is code."""
    rows, inside = [], not section
    for line in _source(relative).splitlines():
        if line.startswith("## "):
            inside = not section or line == "## " + section
        if inside and line.startswith("| `"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_the_capabilities_served_are_those_the_protocol_doc_says_the_adapter_serves() -> None:
    from dbh_adapter._faults import FaultSet
    from dbh_adapter._session import BASE_CAPABILITIES, IN_PROCESS_RUNS, SYNTHETIC_DATA

    served, faults = set(), set()
    for name, _, adapter in _table_rows("docs/worker-protocol.md", "Capabilities"):
        name = name.strip("`")
        if name == "fault:<name>":
            faults = set(re.findall(r"`(\w+)`", adapter))
        elif adapter.startswith("yes"):
            served.add(name)
    assert served == set(BASE_CAPABILITIES) | {IN_PROCESS_RUNS, SYNTHETIC_DATA}
    assert faults == set(FaultSet.SUPPORTED)


def test_the_monitor_defaults_are_the_schemas() -> None:
    from dbh_adapter._scenario import MONITOR_DEFAULTS

    documented = {}
    for row in _table_rows("docs/scenario-keys.md"):
        documented[row[0].strip("`")] = row[2].strip("`")
    for key, value in MONITOR_DEFAULTS.items():
        want = documented.get(f"monitors.{key}")
        assert want is not None, f"monitors.{key}: not a key of docs/scenario-keys.md"
        if isinstance(value, bool):
            assert want == str(value).lower(), key
        elif isinstance(value, (int, float)):
            assert float(want) == value, key
        elif isinstance(value, list):
            assert want == "[" + ", ".join(value) + "]", key
        else:
            assert want == value, key
