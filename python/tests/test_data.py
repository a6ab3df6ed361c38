"""The dataset wrapper (_data.py): every sample the user's loader reads, by
the user's own index, from the main process and from DataLoader workers."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Subset

import dbh_adapter
from dbh_adapter._data import ERROR_MESSAGE_CHARS, ReportingDataset, error_text
from fakes import Squares, TinyNet, of, types


def _reads(events: list[dict[str, Any]]) -> list[int]:
    return [e["index"] for e in of(events, "sample_read")]


def test_the_dataset_is_announced_after_hello_and_each_read_reported(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(Squares(8))  # before hello: its event waits for it
    ds[7]  # before hello: not reported
    dbh.watch(TinyNet())
    assert ds[3].tolist() == [3.0, 9.0]
    ds[5]
    dbh.done()
    ds[1]  # after done: not reported
    events = sup.events()
    assert types(events) == ["hello", "dataset", "run_begin", "sample_read", "sample_read", "run_end", "done"]
    assert of(events, "dataset")[0]["size"] == 8
    assert _reads(events) == [3, 5]
    assert set(of(events, "sample_read")[0]) == {"type", "t", "index"}


def test_the_wrapper_forwards_and_pickles_and_has_no_batched_fetch(supervisor: Any) -> None:
    sup = supervisor()
    ds = sup.connect().dataset(Squares(6))
    assert isinstance(ds, ReportingDataset) and isinstance(ds, torch.utils.data.Dataset)
    assert len(ds) == 6 and ds.label == "squares"
    assert not hasattr(ds, "__getitems__")  # DataLoader and Subset read through __getitem__
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == 6 and copy[2].tolist() == [2.0, 4.0] and copy.label == "squares"
    with pytest.raises(AttributeError):
        ds.missing  # noqa: B018


def test_a_read_that_raises_is_reported_and_reraised_unchanged(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(Squares(8, bad=(4,)))
    dbh.watch(TinyNet())
    with pytest.raises(ValueError) as caught:
        ds[4]
    assert str(caught.value) == "cannot decode sample 4" and type(caught.value) is ValueError
    dbh.training = True
    dbh.exception(caught.value)
    events = sup.events()
    assert of(events, "sample_read") == [{**of(events, "sample_read")[0], "index": 4,
                                          "error": "ValueError: cannot decode sample 4"}]
    error = of(events, "error")[0]
    assert error["kind"] == "data" and error["phase"] == "data" and error["sample"] == 4
    assert events[-1]["status"] == "error"


def test_names_name_the_samples_read_under_a_subset_too(supervisor: Any) -> None:
    sup = supervisor(data={"subset": [6, 2]})
    dbh = sup.connect()
    files = [f"img_{i:03d}.png" for i in range(8)]
    ds = dbh.dataset(Squares(8, bad=(2,)), names=files)
    dbh.watch(TinyNet())
    ds[0]
    with pytest.raises(ValueError):
        ds[1]
    by_function = dbh.dataset(Squares(8), names=lambda i: "x" * 1000)
    by_function[1]
    dbh.done()
    reads = of(sup.events(), "sample_read")
    assert [(r["index"], r["name"], "error" in r) for r in reads[:2]] == [(6, "img_006.png", False),
                                                                         (2, "img_002.png", True)]
    assert reads[2]["index"] == 2 and reads[2]["name"] == "x" * 256  # cut


def test_an_error_message_is_cut_to_500_characters() -> None:
    text = error_text(OSError("x" * 5000))
    assert text == "OSError: " + "x" * ERROR_MESSAGE_CHARS
    assert len(json.dumps(error_text(ValueError("\U0001F600" * 500)))) <= 2500  # escaped, one atomic line still


class _Emoji(Squares):
    def __getitem__(self, index: int) -> torch.Tensor:
        raise OSError("\U0001F600" * 2000)


def test_a_workers_line_stays_one_atomic_write_with_the_longest_name_and_error(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(_Emoji(2), names=lambda i: "\U0001F600" * 2000)
    dbh.watch(TinyNet())
    loader = iter(DataLoader(ds, batch_size=1, num_workers=1, multiprocessing_context="fork"))
    with pytest.raises(OSError) as caught:
        next(loader)
    caught.value.__traceback__ = None
    del loader, caught
    dbh.done()
    reads = of(sup.events(), "sample_read")
    assert reads and reads[0]["index"] == 0  # written by the worker: its line was below PIPE_BUF
    for read in reads:  # (the worker may have read ahead)
        assert read["name"].startswith("\U0001F600") and read["error"].startswith("OSError: \U0001F600")


def test_subset_indices_are_the_users_own(supervisor: Any) -> None:
    sup = supervisor(data={"subset": [5, 2, 7]})
    dbh = sup.connect()
    ds = dbh.dataset(Squares(8))
    assert isinstance(ds, Subset) and len(ds) == 3
    dbh.watch(TinyNet())
    got = [batch.tolist() for batch in DataLoader(ds, batch_size=3)]
    assert got == [[[5.0, 25.0], [2.0, 4.0], [7.0, 49.0]]]
    dbh.done()
    events = sup.events()
    assert of(events, "dataset")[0]["size"] == 8  # the user's dataset, not the subset
    assert _reads(events) == [5, 2, 7]


def test_a_subset_outside_the_dataset_is_refused(supervisor: Any) -> None:
    sup = supervisor(data={"subset": [1, 8]})
    with pytest.raises(IndexError, match=r"data.subset: expected indices of the training dataset, 0 to 7 .* got \[8\]"):
        sup.connect().dataset(Squares(8))


def test_forked_loader_workers_report_their_reads(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(Squares(16))
    dbh.watch(TinyNet())
    loader = DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork")
    assert sum(len(b) for b in loader) == 16
    del loader
    dbh.done()
    events = sup.events()  # every line whole: the workers' lines did not interleave
    assert sorted(_reads(events)) == list(range(16))
    assert types(events)[-2:] == ["run_end", "done"]


def test_a_read_that_raises_in_a_forked_worker_is_reported_by_the_worker(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(Squares(8, bad=(3,)))
    dbh.watch(TinyNet())
    loader = iter(DataLoader(ds, batch_size=1, num_workers=1, multiprocessing_context="fork"))
    dbh.training = True
    message = ""
    try:
        for _ in loader:
            pass
    except ValueError as e:
        message = str(e)
        dbh.exception(e)
        e.__traceback__ = None  # its frames hold the loader: let it go now, not at a garbage collection
    del loader  # the worker ends
    assert "Caught ValueError in DataLoader worker process 0" in message
    events = sup.events()
    failed = [e for e in of(events, "sample_read") if "error" in e]
    assert failed == [{**failed[0], "index": 3, "error": "ValueError: cannot decode sample 3"}]
    error = of(events, "error")[0]
    assert error["kind"] == "data"  # re-raised by the loader from its worker
    assert "sample" not in error  # the index travelled in the worker's sample_read


def test_spawned_loader_workers_read_without_reporting(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    ds = dbh.dataset(Squares(4))
    dbh.watch(TinyNet())
    loader = DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context="spawn")
    assert [b[:, 0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0]]
    del loader
    ds[0]  # the main process still reports
    dbh.done()
    events = sup.events()
    assert _reads(events) == [0]
    assert types(events)[-2:] == ["run_end", "done"]


def test_inactive_sessions_return_the_dataset_itself() -> None:
    ds = Squares(3)
    assert dbh_adapter.connect({}).dataset(ds) is ds


def _synthetic(i: int) -> torch.Tensor:
    return torch.tensor([-1.0, float(i)])


def test_a_trainings_own_synthetic_samples_stand_for_dbhs_synthetic_data(supervisor: Any) -> None:
    sup = supervisor(data={"source": "synthetic_boxes"})
    dbh = sup.connect()
    data = dbh.dataset(Squares(4, bad=(2,)), names=["a", "b", "c", "d"], synthetic=_synthetic)
    assert "synthetic_data" in dbh.capabilities()
    dbh.hello(TinyNet())
    assert [data[i].tolist() for i in range(4)] == [[-1.0, float(i)] for i in range(4)]  # the bad sample is never read
    dbh.done()
    reads = of(sup.events(), "sample_read")
    assert [r["index"] for r in reads] == [0, 1, 2, 3] and all("name" not in r and "error" not in r for r in reads)
    assert "synthetic_data" in of(sup.events(), "hello")[0]["capabilities"]


def test_on_real_data_the_synthetic_maker_only_says_it_can(supervisor: Any) -> None:
    sup = supervisor()
    dbh = sup.connect()
    data = dbh.dataset(Squares(3), synthetic=_synthetic)
    dbh.hello(TinyNet())
    assert data[1].tolist() == Squares(3)[1].tolist()
    assert "synthetic_data" in of(sup.events(), "hello")[0]["capabilities"]
    plain = supervisor()
    other = plain.connect()
    other.dataset(Squares(3))
    other.hello(TinyNet())
    assert "synthetic_data" not in of(plain.events(), "hello")[0]["capabilities"]
