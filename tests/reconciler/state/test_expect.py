"""When the view shows what the worker's own write (or the 409 it met) requires."""

from __future__ import annotations

import pytest

from gpuclass.reconciler.state.expect import Expectation, Expectations
from gpuclass.shared.kube.syncview import ResourceSync

KEY = ("", "c")


def view(version: str = "10", *, synced: bool = True, lists: int = 1) -> ResourceSync:
    return ResourceSync(listed_once=True, synced=synced, version=version, lists=lists)


def written(version: str) -> Expectation:
    return Expectation(version, newer=False, since=0.0, lists=1)


def conflicted(stale: str) -> Expectation:
    return Expectation(stale, newer=True, since=0.0, lists=1)


@pytest.mark.parametrize(
    ("expectation", "held", "source", "met"),
    [
        pytest.param(written("12"), "12", view("12"), True, id="write-arrived"),
        pytest.param(written("12"), "13", view("13"), True, id="write-and-a-newer-change-arrived"),
        pytest.param(written("12"), "9", view("11"), False, id="write-not-yet-in"),
        pytest.param(written("12"), "", view("11"), False, id="create-not-yet-in"),
        pytest.param(written("12"), "", view("14"), True, id="came-and-was-deleted"),
        pytest.param(written("12"), "9", view("9", lists=2), True, id="a-list-begun-since-is-in"),
        pytest.param(
            written("12"), "9", view("9", synced=False, lists=2), False, id="a-list-under-way"
        ),
        pytest.param(written("12"), "9", view("9", lists=1), False, id="only-the-list-before"),
        pytest.param(written(""), "", view(""), True, id="a-write-without-a-version"),
        pytest.param(written("b"), "a", view("a"), True, id="versions-that-do-not-compare"),
        pytest.param(conflicted("12"), "12", view("20"), False, id="conflict-view-still-at-stale"),
        pytest.param(conflicted("12"), "15", view("15"), True, id="conflict-view-moved-past"),
        pytest.param(conflicted("12"), "9", view("11"), False, id="conflict-view-before-stale"),
        pytest.param(conflicted("12"), "", view("15"), True, id="conflict-object-deleted"),
        pytest.param(conflicted("12"), "12", view("12", lists=2), True, id="conflict-relisted"),
        pytest.param(conflicted(""), "", view("15"), False, id="create-conflict-not-yet-in"),
        pytest.param(conflicted(""), "14", view("15"), True, id="create-conflict-object-in"),
        pytest.param(conflicted("b"), "b", view("c"), False, id="conflict-opaque-still-stale"),
        pytest.param(conflicted("b"), "c", view("c"), True, id="conflict-opaque-moved"),
    ],
)
def test_met(expectation: Expectation, held: str, source: ResourceSync, met: bool) -> None:
    assert expectation.met(held=held, sync=source) is met


def test_one_per_object_newest_wins_and_met_ones_are_dropped() -> None:
    expect = Expectations()
    expect.written("gpuclasses", KEY, version="12", now=1.0, lists=1)
    expect.conflicted("gpuclasses", KEY, stale="12", now=2.0, lists=1)
    assert len(expect) == 1
    unmet = expect.unmet("gpuclasses", KEY, held="12", sync=view("12"))
    assert unmet == Expectation("12", newer=True, since=2.0, lists=1)
    assert expect.unmet("gpuclasses", KEY, held="13", sync=view("13")) is None
    assert len(expect) == 0
    expect.written("copy-record", ("ns", "r"), version="5", now=3.0, lists=1)
    expect.drop("copy-record", ("ns", "r"))
    assert expect.unmet("copy-record", ("ns", "r"), held="", sync=view("1")) is None
