"""The adapter's exceptions: one base, `DbhAdapterError`, for what the adapter
raises about dbh itself (a training's findings are `Finding`, _monitors.py)."""

from __future__ import annotations


class DbhAdapterError(RuntimeError):
    """Base of the exceptions this package raises about its link to dbh."""


class ProtocolError(DbhAdapterError):
    """The environment says dbh started this process, but not as the protocol says."""


class KeyNotApplied(DbhAdapterError):
    """A key dbh passed did not reach the training's configuration: the run
    would train something other than the scenario asks for.

    When it is raised the adapter has already written the `error` event (kind
    `harness`) and `done`: dbh marks the trial unresolved, whatever the
    process's exit status. Let it end the process (with its traceback on
    stderr); catching it does not make the run one that dbh reads.
    """

    def __init__(self, key: str, want: object, got: object, where: str) -> None:
        super().__init__(f"{key} is {want} in the scenario but the command trains with {where} = {got}: the key "
                         f"did not reach its configuration (worker.keys maps dbh keys to yours)")
        self.key = key
        self.want = want
        self.got = got
        self.where = where


class NotSupported(DbhAdapterError):
    """What dbh does not serve yet, named: a launch of several ranks
    (torchrun, Lightning's DDP with more than one device). On the process dbh
    started, the adapter has already written the `error` event (kind
    `harness`) and `done` when it raises: dbh marks the trial unresolved and
    prints the message; every other rank raises it too, never exiting
    silently."""
