"""A warm worker: one Python process that has imported what a training
imports, and forks one child per trial that runs the training's ``__main__``
(Note [A warm worker], docs/worker-protocol.md).

Starting Python and importing torch, Lightning and Hydra takes most of a
short trial (6.8 of 8.5 s on a 2-core machine). Its supervisor starts this
module once per command, where every trial runs the same training::

    python -m dbh_adapter._zygote --socket FD SCRIPT
    python -m dbh_adapter._zygote --socket FD -m MODULE

It imports the third-party modules SCRIPT (or MODULE) imports at its top
level, never the training's own modules (importing them may do anything) and
never CUDA, then answers requests on the socket FD (a SOCK_SEQPACKET end whose
other end the supervisor holds). Each request is one message: a JSON object
``{"argv": [...], "env": {...}, "cwd": "..."}`` with four descriptors
(stdin, stdout, stderr and the event pipe, which become 0 to 3). The reply is
``{"pid": N}``, the trial's process, or ``{"error": "..."}``.

The trial is forked twice: the intermediate process exits at once, so the
trial is re-parented to the nearest subreaper, which is the supervisor (dbh is
one before it starts any worker: Note [Every descendant ends with the
trial]). The supervisor then waits for it, signals its process group and
reads its exit status exactly as for a worker it spawned itself. The trial leads its own process group, waits
until it is dbh's child, takes the request's descriptors, environment,
working folder and arguments, reseeds what a fresh interpreter seeds from the
system (``random``, NumPy's global generator) and runs the training as
``python SCRIPT ARGS`` would. What a forked trial cannot have is a fresh
interpreter (nor its own hash seed): a trial whose answer depends on one
(determinism across processes, leaks, a second run) must be a process of its
own.
"""

from __future__ import annotations

import ast
import fcntl
import importlib
import importlib.util
import json
import os
import random
import runpy
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from . import _under_dbh_at_import
from ._protocol import ENV_SUPERVISOR_PID, SUPERVISOR_GONE_EXIT, die_with_supervisor

# The most bytes of one request, and the descriptors it carries (stdin,
# stdout, stderr, the event pipe: the worker protocol's fd 3).
MAX_REQUEST_BYTES = 1 << 20
TRIAL_FDS = 4
# How long a trial waits to become its supervisor's child (the intermediate
# process exits at once; this bounds a kernel that never re-parents it).
REPARENT_WAIT_S = 5.0
# What the zygote exits with when it cannot serve warm trials (CUDA was
# initialised by an import): dbh starts every trial cold then.
CANNOT_SERVE_EXIT = 3


@dataclass(frozen=True)
class Target:
    """What the trials run: a script's path, or a module run as ``-m``."""

    script: str = ""
    module: str = ""


@dataclass(frozen=True)
class TrialRequest:
    """One trial: its ``sys.argv`` (``argv[0]`` the script, as Python sets it),
    its whole environment and its working folder."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def parse_request(data: bytes) -> TrialRequest:
    """The request in `data`; ValueError naming the field that is not what the
    protocol says."""
    try:
        obj: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"request: expected a JSON object, got {data[:80]!r}: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"request: expected a JSON object, got {type(obj).__name__}")
    argv = obj.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("request.argv: expected a non-empty list of strings")
    env = obj.get("env")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("request.env: expected an object of strings")
    cwd = obj.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        raise ValueError("request.cwd: expected a folder")
    return TrialRequest(argv=list(argv), env=dict(env), cwd=cwd)


def imports_of(source: str) -> list[str]:
    """The modules `source` imports at its top level (inside top-level ``if``,
    ``try`` and ``with`` blocks too, not inside functions or classes), in
    order, each once; relative imports are left out."""
    names: list[str] = []

    def visit(body: Sequence[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module:
                    names.append(node.module)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(ast.parse(source).body)
    return list(dict.fromkeys(names))


def is_installed(name: str, own_folder: str) -> bool:
    """Whether module `name` is installed (the standard library, site-packages)
    rather than the training's own: a module found under `own_folder` (the
    script's folder, which Python puts first on sys.path) is the training's."""
    try:
        spec = importlib.util.find_spec(name.split(".")[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    origin = spec.origin or ""
    if origin in ("built-in", "frozen"):
        return True
    locations = [origin] if origin else list(spec.submodule_search_locations or [])
    own = os.path.realpath(own_folder) + os.sep
    return bool(locations) and not any(os.path.realpath(p).startswith(own) for p in locations)


def preload(target: Target) -> list[str]:
    """Imports the installed modules the target imports at its top level and
    returns their names; a module that fails to import is left to the trial,
    which reports its own error as a cold start would."""
    if target.script:
        own_folder = os.path.dirname(os.path.abspath(target.script))
        with open(target.script, encoding="utf-8") as f:
            source = f.read()
    else:
        spec = importlib.util.find_spec(target.module)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return []
        own_folder = os.getcwd()
        with open(spec.origin, encoding="utf-8") as f:
            source = f.read()
    loaded: list[str] = []
    for name in imports_of(source):
        if not is_installed(name, own_folder):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the trial imports it again and reports its own error
            continue
        loaded.append(name)
    return loaded


def cuda_initialised() -> bool:
    """Whether an import initialised CUDA in this process (a forked child could
    not use it)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else False


def exit_code_of(e: SystemExit) -> int:
    """The status ``python SCRIPT`` exits with for `e` (None: 0; a number: it;
    anything else is printed to stderr: 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def run_target(target: Target, argv: list[str]) -> int:
    """Runs the training as ``python SCRIPT ARGS`` (or ``-m MODULE``) would in
    this process and returns its exit status."""
    sys.argv = list(argv)
    if target.script:
        sys.path[0] = os.path.dirname(os.path.abspath(target.script))
    try:
        if target.script:
            runpy.run_path(target.script, run_name="__main__")
        else:
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return exit_code_of(e)
    except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def _reseed() -> None:
    # A fresh interpreter seeds these from the system; a fork inherits the
    # zygote's state, and every trial would draw the same numbers.
    random.seed()
    numpy_random = getattr(sys.modules.get("numpy"), "random", None)
    seed = getattr(numpy_random, "seed", None)
    if callable(seed):
        seed()


def _apply_threads(env: dict[str, str]) -> None:
    # torch read the thread variables when the zygote imported it, from the
    # zygote's environment; the trial's apply here.
    torch = sys.modules.get("torch")
    set_num_threads = getattr(torch, "set_num_threads", None)
    text = env.get("OMP_NUM_THREADS", "")
    if callable(set_num_threads) and text.isdigit() and int(text) > 0:
        set_num_threads(int(text))


def _take_descriptors(fds: list[int]) -> None:
    # Each moved above the four places first: a received descriptor may itself
    # be one of 0 to 3.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 16) for fd in fds]
    for fd in fds:
        os.close(fd)
    for place, fd in enumerate(moved):
        os.dup2(fd, place, inheritable=True)
        os.close(fd)


def _become_trial(request: TrialRequest, fds: list[int], sock: socket.socket, intermediate: int,
                  target: Target) -> NoReturn:
    code = 1
    try:
        os.setpgid(0, 0)
        sock.close()
        deadline = time.monotonic() + REPARENT_WAIT_S
        while os.getppid() == intermediate and time.monotonic() < deadline:
            time.sleep(0.0005)
        supervisor = request.env.get(ENV_SUPERVISOR_PID, "")
        if supervisor and str(os.getppid()) != supervisor:
            os._exit(SUPERVISOR_GONE_EXIT)  # not dbh's child: it could not wait for this process
        _take_descriptors(fds)
        os.environ.clear()
        os.environ.update(request.env)
        os.chdir(request.cwd)
        _reseed()
        _apply_threads(request.env)
        # The adapter was imported by this warm worker outside dbh (no DBH_
        # variables): what its import does under dbh (the parser's record,
        # the runs again) is done now, in the trial's environment.
        _under_dbh_at_import()
        code = run_target(target, request.argv)
    except BaseException:  # noqa: BLE001 - never back into the zygote's loop
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
                pass
        os._exit(code)


def spawn(request: TrialRequest, fds: list[int], sock: socket.socket, target: Target) -> int:
    """Forks the trial of `request` (through an intermediate process that exits
    at once) and returns its pid."""
    read_end, write_end = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        try:
            os.close(read_end)
            trial = os.fork()
            if trial == 0:
                os.close(write_end)
                _become_trial(request, fds, sock, os.getppid(), target)
            os.write(write_end, str(trial).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        text = os.read(read_end, 32)
    finally:
        os.close(read_end)
        os.waitpid(intermediate, 0)
    if not text:
        raise OSError("the trial's process could not be forked")
    return int(text)


def serve(sock: socket.socket, target: Target) -> int:
    """Answers requests until dbh closes its end; returns the exit status."""
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST_BYTES, TRIAL_FDS)
        except OSError:
            return 0
        if not data and not fds:
            return 0  # dbh closed its end
        try:
            if len(fds) != TRIAL_FDS:
                raise ValueError(f"request: expected {TRIAL_FDS} descriptors, got {len(fds)}")
            reply: dict[str, Any] = {"pid": spawn(parse_request(data), fds, sock, target)}
        except (ValueError, OSError) as e:
            reply = {"error": str(e)}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(reply).encode())


def parse_arguments(argv: Sequence[str]) -> tuple[int, Target]:
    """``--socket FD SCRIPT`` or ``--socket FD -m MODULE``; ValueError otherwise."""
    words = list(argv)
    if len(words) < 3 or words[0] != "--socket" or not words[1].isdigit():
        raise ValueError("usage: python -m dbh_adapter._zygote --socket FD (SCRIPT | -m MODULE)")
    fd = int(words[1])
    if words[2] == "-m":
        if len(words) != 4:
            raise ValueError("usage: python -m dbh_adapter._zygote --socket FD -m MODULE")
        return fd, Target(module=words[3])
    if len(words) != 3:
        raise ValueError("usage: python -m dbh_adapter._zygote --socket FD SCRIPT")
    return fd, Target(script=words[2])


def main(argv: Sequence[str]) -> int:
    try:
        fd, target = parse_arguments(argv)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    die_with_supervisor()
    # torch.cuda.is_available() through NVML, which does not initialise CUDA.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    preload(target)
    if cuda_initialised():
        print("dbh_adapter._zygote: an import initialised CUDA; a forked trial could not use it", file=sys.stderr)
        return CANNOT_SERVE_EXIT
    with socket.socket(fileno=fd) as sock:
        return serve(sock, target)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
