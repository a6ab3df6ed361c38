"""The event writer: one JSON object per line on the event pipe (docs/events.md).

Note [Events from several processes]: the process dbh started (the training's
main process) owns the pipe; a fork of it (a DataLoader worker with the
default start method) inherits the descriptor and may write too, which the
dataset wrapper (_data.py) does for the samples it reads. A line is one
`os.write` below PIPE_BUF (4096 bytes), which POSIX makes atomic on a pipe, so
lines from several processes never interleave. Such a child
  - writes only while the descriptor is still the pipe the writer was made for
    (same st_dev/st_ino): a process started with spawn or forkserver gets a
    copy of the writer whose descriptor number may be closed (EBADF) or reused
    for another file;
  - stops reporting, silently and for good, at the first write that fails;
  - never ends itself: only the main process exits (SUPERVISOR_GONE_EXIT) when
    the supervisor is gone, as the supervisor's death would end it.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

from ._protocol import SUPERVISOR_GONE_EXIT

# What POSIX guarantees to write to a pipe in one piece.
PIPE_BUF = 4096
# dbh skips an event line longer than this (harness/proto/events.h,
# kMaxEventLineBytes; tests/unit/harness/worker_protocol_test.cc binds the two).
MAX_EVENT_LINE_BYTES = 1 << 20
# dbh refuses an event nested deeper than this (kMaxEventDepth, the same test
# binds them): the event is level 1, `hello`'s `config` level 2.
MAX_EVENT_DEPTH = 64


def nesting(value: Any) -> int:
    """How deep `value`'s lists and dicts nest (a scalar is 0), counted
    without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_EVENT_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _plain(value: Any) -> Any:
    """JSON for values json does not know (tensors' items, paths)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class EventWriter:
    """Writes events to the pipe `fd`: whole lines, one write each where
    possible, so that a worker that dies leaves at most its last line torn.

    `muted` writes nothing (a rank other than 0 of a distributed training:
    one event stream per trial). In the process that made the writer a write
    that finds the supervisor gone (EPIPE) ends the process as the
    supervisor's death would; in any other process (Note [Events from several
    processes]) the writer goes quiet instead.
    """

    def __init__(self, fd: int, *, muted: bool = False) -> None:
        st = os.fstat(fd)  # OSError when fd is not open
        self.fd = fd
        self.muted = muted
        self._identity = (st.st_dev, st.st_ino)
        self._owner_pid = os.getpid()
        self._start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
        self._lock = threading.Lock()
        self._quiet_pid = 0  # the other process in which writing stopped

    # --- pickling: a copy for a spawned DataLoader worker --------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- writing ------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        """Writes event `type_` with `t` and `fields`; a field that is None is
        left out (docs/events.md: `?` fields are written only when they apply)."""
        if self.muted:
            return
        event: dict[str, Any] = {"type": type_, "t": round(time.monotonic() - self._start, 6)}
        for key, value in fields.items():
            value = _json_safe(value)
            if value is not None:
                event[key] = value
        line = (json.dumps(event, allow_nan=False, separators=(",", ":"), default=_plain) + "\n").encode()
        if os.getpid() == self._owner_pid:
            self._write_owner(line)
        else:
            self._write_other(line)

    def _write_owner(self, line: bytes) -> None:
        # One thread at a time: a line above PIPE_BUF takes several writes.
        with self._lock:
            try:
                view = memoryview(line)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except BrokenPipeError:
                os._exit(SUPERVISOR_GONE_EXIT)

    def _write_other(self, line: bytes) -> None:
        pid = os.getpid()
        if self._quiet_pid == pid or len(line) >= PIPE_BUF:
            return
        try:
            # Each time: one fstat is cheap beside a sample's read, and the
            # number may be closed and reused in this process at any time.
            st = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) != self._identity or os.write(self.fd, line) != len(line):
                self._quiet_pid = pid  # a short write cannot happen below PIPE_BUF on a blocking pipe
        except OSError:
            self._quiet_pid = pid


def _json_safe(value: Any) -> Any:
    """`value` as JSON can carry it: a NaN or infinite float becomes None
    (null inside a list or object, left out at the top level, as dbh's own
    worker writes it; a value's bits, such as `grad_norm_bits`, keep it), in
    lists, tuples and dicts too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def fit_in_line(fields: dict[str, Any], config: dict[str, Any], options: list[dict[str, Any]] | None,
                budget: int = MAX_EVENT_LINE_BYTES - 16 * 1024) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """`hello`'s `config` and `options` cut, in their order, so that the line
    with `fields` stays within `budget` bytes (dbh's bound, less room for the
    rest of the event): a configuration of the adapter's largest allowed
    size is never a line dbh skips, and no value nests deeper than dbh
    reads."""
    used = len(json.dumps(fields, separators=(",", ":"), default=str)) + 64
    kept_options: list[dict[str, Any]] | None = None
    if options is not None:
        kept_options = []
        for item in options:
            size = len(json.dumps(item, separators=(",", ":"))) + 1
            if used + size > budget:
                break
            used += size
            kept_options.append(item)
    kept: dict[str, Any] = {}
    for key, value in config.items():
        if nesting(value) > MAX_EVENT_DEPTH - 2:  # a value nested past dbh's depth is left out
            continue
        size = len(json.dumps({key: value}, separators=(",", ":"), default=str))
        if used + size > budget:
            break
        used += size
        kept[key] = value
    return kept, kept_options
