"""Note [A script that fits once, run again]: `dbh repeat --in-process N`
asks whether a training fails on its second run in one process (seed 004).
A script that builds and fits its model once, without `dbh.runs()`, is run
again by the adapter the way `python -m runpy` runs a script: under dbh,
with repeat.in_process above 1, `import dbh_adapter` runs the script's
`__main__` (the file, or the module of `python -m`) that many times in this
interpreter with the same arguments, each run between its `run_begin` and
`run_end`, then ends the process. Every `connect()` of those runs returns
the one session of the process, so there is one `hello` and one `done`. A
script that calls `dbh.runs()` itself runs once: its own loop is the runs.

What cannot be re-entered is said, not hidden: a run that ends with
`sys.exit(code)` other than 0 ends the process with that code after the
session's `error`; Hydra's global state is cleared between runs (each
`@hydra.main` composes its configuration again)."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._session import Session

_session: Session | None = None  # the process's one session while the script is run again
_running = False
_serves = False  # repeat.in_process is above 1 and there is a script to run again (describe mode too)


def session_of_the_process() -> Session | None:
    """The session every `connect()` returns while the script is run again."""
    return _session if _running else None


def adopt(session: Session) -> None:
    """The process's session, while the script is run again: it counts the
    runs and lists `in_process_runs` in `hello`."""
    global _session
    if not _serves or session.frame is None or session.facts is None:
        return
    if "in_process_runs" not in session.frame.capabilities:
        session.frame.capabilities.append("in_process_runs")
    if _running:
        _session = session
        session.frame.total_runs = session.facts.in_process


def _main_target() -> tuple[str, str] | None:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) if spec is not None else None
    if isinstance(name, str) and name:
        return ("module", name)
    path = getattr(main, "__file__", None)
    return ("path", str(path)) if path else None


def _clear_framework_state() -> None:
    hydra = sys.modules.get("hydra.core.global_hydra")
    if hydra is not None:
        hydra.GlobalHydra.instance().clear()


def run_main_again(in_process: int, describe: bool) -> None:
    """Runs the script's `__main__` `in_process` times and ends the process
    (Note [A script that fits once, run again]); returns at once when there
    is nothing to repeat, no script to run, in describe mode, or when called
    from a run itself."""
    global _running, _serves
    target = _main_target()
    if _running or in_process <= 1 or target is None:
        return
    _serves = True
    if describe:
        return
    _running = True
    status = 0
    for run in range(in_process):
        if run > 0:
            frame = _session.frame if _session is not None else None
            if frame is None or frame.finished:
                break  # the script ran its runs itself (dbh.runs()), or a run failed: done is written
            frame.next_run(run)
            _clear_framework_state()
        try:
            if target[0] == "module":
                runpy.run_module(target[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target[1], run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                status = e.code if isinstance(e.code, int) else 1
                if _session is not None and _session.frame is not None and not _session.frame.finished:
                    _session.frame.harness_error(
                        f"run {run} of repeat.in_process ended with sys.exit({e.code!r}): the script cannot be "
                        "run again in this process")
                break
        except BaseException as e:  # the traceback is the user's; the session says what ended the run
            traceback.print_exc()
            if _session is not None and _session.frame is not None and not _session.frame.finished:
                _session.frame.exception(e)
            status = 1
            break
    if _session is not None and _session.frame is not None and not _session.frame.finished:
        _session.frame.done("passed")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
