"""Run your own PyTorch or Lightning training under dbh.

dbh (a harness that reproduces, injects and bisects training failures) starts
your training command as its worker; this package is the worker's side of the
contract (docs/worker-protocol.md in the dbh repository):

    import dbh_adapter
    dbh = dbh_adapter.connect()                 # inactive outside dbh: nothing changes
    train_set = dbh.dataset(train_set)          # reads reported; the sample subset dbh asks for
    trainer = L.Trainer(..., callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(module, datamodule=dm, ckpt_path=dbh.resume_path())

A plain PyTorch loop uses the session directly (with fp16, pass the loss
scaler: `dbh.watch(model, optimizer, scaler=torch.amp.GradScaler())`, and
`backward` / `optimizer_step` scale, unscale, step and update it):

    with dbh_adapter.connect() as dbh:
        dbh.watch(model, optimizer)
        for step, batch in dbh.steps(loader):
            dbh.backward(loss_of(model, batch))
            dbh.optimizer_step()

Nothing is printed: the session writes to the event pipe dbh opened, and
outside dbh it writes nothing at all. What it raises: `Finding` (a
non-finite value the monitors found; the run has diverged), `KeyNotApplied`
(a key dbh passed did not reach the training's configuration) and
`ProtocolError` (dbh's environment is not the protocol's), the last two
`DbhAdapterError`s.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ._bits import float_bits
from ._errors import DbhAdapterError, KeyNotApplied, NotSupported, ProtocolError
from ._monitors import Finding
from ._parser import record_parses
from ._protocol import Link, die_with_supervisor, env_rank, multi_rank_message, started_by_dbh, under_dbh, world_size
from ._reruns import adopt, run_main_again, session_of_the_process
from ._scenario import ScenarioFacts
from ._session import VERSION, Session

__version__ = VERSION



def connect(environ: Mapping[str, str] | None = None, *,
            config: Mapping[str, Any] | argparse.Namespace | None = None) -> Session:
    """The session of this process: connected to dbh when dbh started it (the
    event pipe, the resolved scenario, the trial folder), else inactive.

    `environ` defaults to os.environ. `config` is the training's own composed
    configuration (a dict, a Hydra DictConfig, an argparse Namespace): `hello`
    reports it, and `dbh scenario from-command --external` finds dbh's keys
    in it, so that no `worker.keys` needs writing by hand. Without it, the
    namespace argparse parsed from the command line is reported. The process's rank (`RANK`, else
    `LOCAL_RANK`, when `WORLD_SIZE` is above 1) decides whether it writes
    events: only rank 0 does. Raises ProtocolError when the environment says
    dbh started the process but not as the protocol says.
    """
    if not under_dbh(environ):
        return Session(None)
    existing = session_of_the_process()
    if existing is not None:  # the script run again (_reruns.py): the process's one session
        if config is not None:
            existing.report_config(config)
        return existing
    ranks = world_size(environ)
    if ranks > 1:
        # One trial is one training process: several ranks are refused by
        # name in every rank, never ended silently.
        message = multi_rank_message(ranks, env_rank(environ))
        if started_by_dbh(environ):
            Session(Link(environ)).harness_error(message)
        raise NotSupported(message)
    die_with_supervisor(environ)
    session = Session(Link(environ), rank=env_rank(environ))
    if config is not None:
        session.report_config(config)
    adopt(session)
    return session


__all__ = ["connect", "Session", "Finding", "DbhAdapterError", "KeyNotApplied", "NotSupported", "ProtocolError",
           "under_dbh",
           "float_bits", "__version__"]


def _under_dbh_at_import() -> None:
    """Under dbh: the command line the training parses is reported in
    `hello` (_parser.py), and a script that fits once is run again for
    repeat.in_process (Note [A script that fits once, run again], _reruns.py).
    Last in this module, so that the script's runs find it whole."""
    if not under_dbh():
        return
    record_parses()
    try:
        link = Link()
    except ProtocolError:
        return  # connect() raises it, where the training can see it
    run_main_again(ScenarioFacts(link.scenario, link.trial_dir).in_process, link.describe)


_under_dbh_at_import()
