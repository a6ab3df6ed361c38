"""The worker's end of the link to dbh (docs/worker-protocol.md).

dbh starts the user's command with the event pipe on an inherited file
descriptor and these variables in the environment; this module reads them,
ties the process's life to its supervisor and writes the events, one JSON
object per line.
"""

import ctypes
import json
import os
import signal
import sys
import time

PROTOCOL_VERSION = 1
EVENT_SCHEMA_VERSION = 1

# The variables dbh sets (harness/supervisor/worker_contract.h, worker_env).
ENV_PROTOCOL = "DBH_WORKER_PROTOCOL"
ENV_EVENT_FD = "DBH_EVENT_FD"
ENV_SCENARIO = "DBH_SCENARIO"
ENV_SCENARIO_HASH = "DBH_SCENARIO_HASH"
ENV_TRIAL_DIR = "DBH_TRIAL_DIR"
ENV_TRIAL = "DBH_TRIAL"
ENV_DESCRIBE = "DBH_WORKER_DESCRIBE"
ENV_SUPERVISOR_PID = "DBH_SUPERVISOR_PID"

# What a worker exits with when its supervisor is gone (kSupervisorGoneExit).
SUPERVISOR_GONE_EXIT = 128 + 9


class ProtocolError(RuntimeError):
    """The environment says dbh started this process, but not as the protocol says."""


def under_dbh(environ=None):
    """Whether dbh started this process as a worker."""
    return (environ if environ is not None else os.environ).get(ENV_PROTOCOL, "") != ""


def die_with_supervisor(environ=None):
    """The kernel kills this process when the supervisor's thread ends
    (PR_SET_PDEATHSIG), and it exits at once when the supervisor is already
    gone: no worker outlives its supervisor."""
    env = environ if environ is not None else os.environ
    text = env.get(ENV_SUPERVISOR_PID, "")
    if not text:
        return
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass
    if str(os.getppid()) != text:
        os._exit(SUPERVISOR_GONE_EXIT)


class EventWriter:
    """Writes events to the pipe: whole lines, flushed one by one, so that a
    worker that dies leaves at most its last line torn. A write that fails
    (the supervisor is gone) ends the process as the supervisor's death
    would."""

    def __init__(self, fd):
        self._start = time.monotonic()
        self._fd = fd

    def emit(self, type_, **fields):
        event = {"type": type_, "t": round(time.monotonic() - self._start, 6)}
        for key, value in fields.items():
            if value is not None:
                event[key] = value
        line = (json.dumps(event, allow_nan=True, separators=(",", ":"), default=_plain) + "\n").encode()
        try:
            view = memoryview(line)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except BrokenPipeError:
            os._exit(SUPERVISOR_GONE_EXIT)


def _plain(value):
    """JSON for values json does not know (tensors' items, paths)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class Link:
    """Everything dbh gave this process: the scenario, the trial folder, the
    event writer, and whether it only asks the worker to describe itself."""

    def __init__(self, environ=None):
        env = environ if environ is not None else os.environ
        version = env.get(ENV_PROTOCOL, "")
        if version != str(PROTOCOL_VERSION):
            raise ProtocolError(
                f"{ENV_PROTOCOL}: expected {PROTOCOL_VERSION} (this adapter's worker protocol), got {version!r}: "
                "use an adapter of the dbh that runs it (pip install <dbh checkout>/python)")
        try:
            self.fd = int(env[ENV_EVENT_FD])
        except (KeyError, ValueError) as e:
            raise ProtocolError(f"{ENV_EVENT_FD}: expected the event pipe's descriptor, got {env.get(ENV_EVENT_FD)!r}") from e
        path = env.get(ENV_SCENARIO, "")
        try:
            with open(path, "r", encoding="utf-8") as f:
                self.scenario = json.load(f)
        except (OSError, ValueError) as e:
            raise ProtocolError(f"{ENV_SCENARIO}: expected the resolved scenario (a JSON file), got {path!r}: {e}") from e
        self.scenario_hash = env.get(ENV_SCENARIO_HASH, "")
        self.trial_dir = env.get(ENV_TRIAL_DIR, "")
        if not self.trial_dir or not os.path.isdir(self.trial_dir):
            raise ProtocolError(f"{ENV_TRIAL_DIR}: expected the trial's folder, got {self.trial_dir!r}")
        self.trial = int(env.get(ENV_TRIAL, "0") or 0)
        self.describe = env.get(ENV_DESCRIBE, "") == "1"
        self.events = EventWriter(self.fd)

    def section(self, name):
        return self.scenario.get(name) or {}
