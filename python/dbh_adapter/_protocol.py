"""The worker's end of the link to dbh (docs/worker-protocol.md).

dbh starts the user's command with the event pipe on an inherited file
descriptor and the variables below in the environment. This module holds
what the adapter shares with dbh's C++ side (each constant names its
counterpart; python/tests/test_contract.py reads those sources and fails when
they differ), reads the environment into a `Link` and ties the process's life
to its supervisor. The events themselves are written by `EventWriter`
(_events.py) on the link's descriptor.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from ._errors import ProtocolError

# --- Shared with dbh's C++ side ------------------------------------------------

# The worker protocol's version (kWorkerProtocolVersion,
# harness/supervisor/worker_contract.h) and the events' (kEventSchemaVersion,
# harness/proto/events.h).
PROTOCOL_VERSION = 1
EVENT_SCHEMA_VERSION = 1

# The variables dbh sets (worker_env in harness/supervisor/worker_contract.h;
# the supervisor's pid is kSupervisorPidEnv in harness/proto/worker_link.h).
ENV_PROTOCOL = "DBH_WORKER_PROTOCOL"
ENV_EVENT_FD = "DBH_EVENT_FD"
ENV_SCENARIO = "DBH_SCENARIO"
ENV_SCENARIO_HASH = "DBH_SCENARIO_HASH"
ENV_TRIAL_DIR = "DBH_TRIAL_DIR"
ENV_TRIAL = "DBH_TRIAL"
ENV_DESCRIBE = "DBH_WORKER_DESCRIBE"
ENV_SUPERVISOR_PID = "DBH_SUPERVISOR_PID"

# What a worker exits with when its supervisor is gone (kSupervisorGoneExit,
# harness/proto/worker_link.h).
SUPERVISOR_GONE_EXIT = 128 + 9

# Note [Loss-scaler skips] (harness/monitors/monitors.cc): with fp16 only this
# many optimizer steps in a row that the loss scaler skips are a failure
# (kScalerSkipLimit, harness/proto/event_types.h).
SCALER_SKIP_LIMIT = 8


def checkpoint_file_name(run: int, step: int) -> str:
    """The name dbh's bisections look for in the trial folder: the checkpoint to
    resume run `run` at `step` (checkpoint_file_name, harness/proto/event_types.cc)."""
    return f"checkpoint-r{run}-s{step}.pt"


def state_file_name(step: int) -> str:
    """The state step `step` starts from, in the trial folder (Note [The same
    state, step by step]; state_file_name, harness/proto/event_types.cc)."""
    return f"state-s{step}.pt"


# --- The process's environment -------------------------------------------------


def under_dbh(environ: Mapping[str, str] | None = None) -> bool:
    """Whether dbh started this process as a worker."""
    return (environ if environ is not None else os.environ).get(ENV_PROTOCOL, "") != ""


def env_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's global rank as a distributed launcher (torchrun, Slurm
    via Lightning) states it: `RANK`, else `LOCAL_RANK`, when `WORLD_SIZE` is
    above 1; 0 otherwise or when they do not parse."""
    env = environ if environ is not None else os.environ
    try:
        if int(env.get("WORLD_SIZE", "1") or 1) <= 1:
            return 0
        return int(env.get("RANK", "") or env.get("LOCAL_RANK", "") or 0)
    except ValueError:
        return 0


def world_size(environ: Mapping[str, str] | None = None) -> int:
    """The number of ranks a distributed launcher states (`WORLD_SIZE`); 1
    when it states none or it does not parse."""
    env = environ if environ is not None else os.environ
    try:
        return max(1, int(env.get("WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def multi_rank_message(ranks: int, rank: int) -> str:
    """What a launch of `ranks` ranks under dbh is told (NotSupported)."""
    return (f"dbh runs one training process per trial: a launch of {ranks} ranks (this is rank {rank}) is not "
            "supported yet; run the trial on one device (Lightning: devices=1; torchrun: --nproc-per-node=1)")


def started_by_dbh(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process's parent is the dbh that supervises it (not a
    launcher that dbh's process started)."""
    env = environ if environ is not None else os.environ
    return str(os.getppid()) == env.get(ENV_SUPERVISOR_PID, "")


def die_with_supervisor(environ: Mapping[str, str] | None = None) -> None:
    """The kernel kills this process when the supervisor's thread ends
    (PR_SET_PDEATHSIG), and it exits at once when the supervisor is already
    gone: no worker outlives its supervisor. Does nothing without
    DBH_SUPERVISOR_PID (a worker started by hand)."""
    env = environ if environ is not None else os.environ
    text = env.get(ENV_SUPERVISOR_PID, "")
    if not text:
        return
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass
    if str(os.getppid()) != text:
        os._exit(SUPERVISOR_GONE_EXIT)


class Link:
    """Everything dbh gave this process: the event pipe's descriptor, the
    resolved scenario, the trial folder, and whether it only asks the worker to
    describe itself. Raises ProtocolError when the environment is not the
    protocol's."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = environ if environ is not None else os.environ
        version = env.get(ENV_PROTOCOL, "")
        if version != str(PROTOCOL_VERSION):
            raise ProtocolError(
                f"{ENV_PROTOCOL}: expected {PROTOCOL_VERSION} (this adapter's worker protocol), got {version!r}: "
                "use an adapter of the dbh that runs it (pip install <dbh checkout>/python)")
        try:
            self.fd = int(env[ENV_EVENT_FD])
        except (KeyError, ValueError) as e:
            raise ProtocolError(
                f"{ENV_EVENT_FD}: expected the event pipe's descriptor, got {env.get(ENV_EVENT_FD)!r}") from e
        path = env.get(ENV_SCENARIO, "")
        try:
            with open(path, encoding="utf-8") as f:
                scenario = json.load(f)
        except (OSError, ValueError) as e:
            raise ProtocolError(
                f"{ENV_SCENARIO}: expected the resolved scenario (a JSON file), got {path!r}: {e}") from e
        if not isinstance(scenario, dict):
            raise ProtocolError(f"{ENV_SCENARIO}: expected a JSON object in {path!r}, got {type(scenario).__name__}")
        self.scenario: dict[str, Any] = scenario
        self.scenario_hash = env.get(ENV_SCENARIO_HASH, "")
        self.trial_dir = env.get(ENV_TRIAL_DIR, "")
        if not self.trial_dir or not os.path.isdir(self.trial_dir):
            raise ProtocolError(f"{ENV_TRIAL_DIR}: expected the trial's folder, got {self.trial_dir!r}")
        try:
            self.trial = int(env.get(ENV_TRIAL, "0") or 0)
        except ValueError as e:
            raise ProtocolError(f"{ENV_TRIAL}: expected the trial's index, got {env.get(ENV_TRIAL)!r}") from e
        self.describe = env.get(ENV_DESCRIBE, "") == "1"
        try:
            os.fstat(self.fd)
        except OSError as e:
            raise ProtocolError(f"{ENV_EVENT_FD}: expected an open descriptor, got {self.fd}: {e}") from e

    def section(self, name: str) -> dict[str, Any]:
        """A top-level section of the scenario (`train`, `data`, …); {} when absent."""
        value = self.scenario.get(name)
        return value if isinstance(value, dict) else {}
