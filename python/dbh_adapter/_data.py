"""The user's dataset as dbh sees it: the samples the training reads.

`Session.dataset(ds)` wraps the training dataset in `ReportingDataset` (and in
a `torch.utils.data.Subset` of it when dbh asks for `data.subset`). The
wrapper forwards `len`, indexing and attributes to the user's dataset and
reports each read on the event pipe:

    {"type": "sample_read", "index": i}                        a sample read
    {"type": "sample_read", "index": i, "error": "T: msg"}     a read that raised
    ... "name": "img_004.png"                                  with `names`, the sample's name

`index` is always the user's own index (the one its `__getitem__` took), also
under a subset, and also from DataLoader worker processes: a forked worker
writes its own lines (Note [Events from several processes], _events.py); one
started with spawn or forkserver reads without reporting.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, Union

import torch.utils.data

from ._events import EventWriter

T_co = TypeVar("T_co", covariant=True)

# The exception's message in a sample_read event is cut to this many
# characters, a sample's name to this many (the supervisor keeps 256 bytes of
# it), and both further when their JSON (non-ASCII is escaped) would not keep
# the line below PIPE_BUF, one atomic write.
ERROR_MESSAGE_CHARS = 500
NAME_CHARS = 256
_ERROR_JSON_BYTES = 2500
_NAME_JSON_BYTES = 1200

# How the user names its samples: a sequence indexed like the dataset (file
# names), or a function of the index (picklable, for spawned loader workers).
Names = Union[Sequence[str], Callable[[int], str]]

# Note [A training's own synthetic samples]: dbh's synthetic data cannot
# stand for an arbitrary model's inputs, so a training that wants diagnose's
# synthetic rungs gives the wrapper a function of the index that makes a
# sample of its own structure, easy to learn (e.g. bright shapes and their
# masks). Under data.source other than `real` every read is made by it, not
# read from the dataset; the reads are reported as usual, without a name.
Synthetic = Callable[[int], Any]

# The attribute a failed read leaves on its exception: the user's index of the
# sample, for the `error` event the session writes when the exception ends the
# run (Session.exception: `sample`).
SAMPLE_ATTRIBUTE = "_dbh_sample_index"


def error_text(exc: BaseException) -> str:
    """`<ExceptionType>: <message>`, the message cut to ERROR_MESSAGE_CHARS
    characters (and shorter if its JSON would exceed _ERROR_JSON_BYTES)."""
    return _cut(f"{type(exc).__name__}: {str(exc)[:ERROR_MESSAGE_CHARS]}", _ERROR_JSON_BYTES)


def _cut(text: str, json_bytes: int) -> str:
    """`text`, shortened until its JSON string takes at most `json_bytes`."""
    while text and len(json.dumps(text)) > json_bytes:
        text = text[:len(text) * 3 // 4]
    return text


def failed_sample(exc: BaseException) -> int | None:
    """The user's index of the sample whose read raised `exc` (or the
    exception it was raised from), when a ReportingDataset in this process saw
    it; None otherwise (a read in a DataLoader worker: its sample_read event
    has the index)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        index = getattr(e, SAMPLE_ATTRIBUTE, None)
        if isinstance(index, int):
            return index
        e = e.__cause__ or e.__context__
    return None


class SampleReporter:
    """Reports the samples read, through the session's event writer, while the
    run is on (between `hello` and `done` in the main process; a forked worker
    keeps the state it was forked with). Picklable: a spawned worker gets a
    copy whose writer stays quiet (_events.py)."""

    def __init__(self, events: EventWriter) -> None:
        self.events = events
        self.on = False

    def read(self, index: int, name: str | None = None, error: str | None = None) -> None:
        if self.on:
            self.events.emit("sample_read", index=index, name=name, error=error)


class ReportingDataset(torch.utils.data.Dataset[T_co]):
    """The user's map-style dataset, each read reported (`sample_read`).

    Forwards `len(ds)`, `ds[i]` and attribute access to `dataset`. It has no
    `__getitems__`, so DataLoader's batched fetch (and Subset's) reads it one
    index at a time through `__getitem__`, the path that reports. `names`
    names the samples in the events (`names[i]` or `names(i)`).
    """

    def __init__(self, dataset: torch.utils.data.Dataset[T_co], reporter: SampleReporter,
                 names: Names | None = None, synthetic: Synthetic | None = None) -> None:
        self.dataset = dataset
        self.reporter = reporter
        self.names = names
        self.synthetic = synthetic  # set: every read is a synthetic sample (data.source not real)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]  # a map-style dataset has a length

    def __getitem__(self, index: int) -> T_co:
        position = _position(index)
        if self.synthetic is not None and position is not None:
            made: T_co = self.synthetic(position)
            self.reporter.read(position)
            return made
        try:
            sample = self.dataset[index]
        except Exception as e:
            if position is not None:
                try:
                    setattr(e, SAMPLE_ATTRIBUTE, position)
                except AttributeError:  # an exception type without a __dict__
                    pass
                self.reporter.read(position, self._name(position), error_text(e))
            raise
        if position is not None:
            self.reporter.read(position, self._name(position))
        return sample

    def _name(self, index: int) -> str | None:
        """The sample's name from `names`, cut to NAME_CHARS; None without one."""
        if self.names is None or not self.reporter.on:
            return None
        try:
            name = self.names(index) if callable(self.names) else self.names[index]
        except Exception:  # a name is a courtesy: never fail the read for it
            return None
        return _cut(str(name)[:NAME_CHARS], _NAME_JSON_BYTES)

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the wrapper lacks. Dunders stay absent (no
        # __getitems__, and pickle's __setstate__ lookups before `dataset` is
        # set must not recurse).
        if name.startswith("__") or name in ("dataset", "reporter", "names", "synthetic"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"ReportingDataset({self.dataset!r})"


def _position(index: Any) -> int | None:
    """`index` as an int when it is one (an int, a NumPy or 0-d tensor integer); else None."""
    try:
        return operator.index(index)
    except TypeError:
        return None


def restrict(dataset: ReportingDataset[T_co], subset: list[int]) -> torch.utils.data.Dataset[T_co]:
    """`dataset` restricted to data.subset, indices of the user's dataset (the
    ones its __getitem__ takes): a Subset of the wrapper, so that each read
    still reports the user's index. [] keeps the whole dataset."""
    if not subset:
        return dataset
    n = len(dataset)
    bad = [i for i in subset if not 0 <= i < n]
    if bad:
        raise IndexError(f"data.subset: expected indices of the training dataset, 0 to {n - 1} (the indices its "
                         f"__getitem__ takes), got {bad[:5]}")
    return torch.utils.data.Subset(dataset, subset)
