"""The generic event kernel: exact pop order on ties, a clock that never runs backwards."""

from __future__ import annotations

import math

import pytest

from evalstop.sim.engine import Engine


def drain(engine: Engine) -> list[tuple[float, object]]:
    popped = []
    while (event := engine.pop()) is not None:
        popped.append((engine.now, event))
    return popped


def test_pops_in_time_order_whatever_the_insertion_order() -> None:
    engine = Engine()
    engine.schedule(3.0, 0, "c")
    engine.schedule(1.0, 0, "a")
    engine.schedule(2.0, 0, "b")
    assert drain(engine) == [(1.0, "a"), (2.0, "b"), (3.0, "c")]


def test_same_time_breaks_on_priority_then_insertion_order() -> None:
    engine = Engine()
    engine.schedule(5.0, 1, ("arrive", 1))
    engine.schedule(5.0, 0, ("depart", 2))
    engine.schedule(5.0, 1, ("arrive", 3))
    engine.schedule(5.0, 0, ("depart", 4))
    engine.schedule(4.0, 9, ("early", 5))
    assert [event for _, event in drain(engine)] == [
        ("early", 5),
        ("depart", 2),
        ("depart", 4),
        ("arrive", 1),
        ("arrive", 3),
    ]


def test_equal_keys_never_compare_the_events() -> None:
    """Events need not be orderable: the sequence number settles every full tie."""

    class Opaque:
        def __init__(self, name: str) -> None:
            self.name = name

    engine = Engine()
    events = [Opaque(n) for n in "xyz"]
    for event in events:
        engine.schedule(1.0, 0, event)
    assert [event.name for _, event in drain(engine)] == ["x", "y", "z"]


def test_events_scheduled_while_draining_keep_the_order() -> None:
    engine = Engine()
    engine.schedule(1.0, 0, "a")
    engine.schedule(2.0, 0, "c")
    assert engine.pop() == "a"
    engine.schedule(2.0, 0, "d")  # same time as "c", inserted later
    engine.schedule(1.0, 0, "b")  # exactly now is allowed
    engine.schedule(2.0, -1, "urgent")
    assert drain(engine) == [(1.0, "b"), (2.0, "urgent"), (2.0, "c"), (2.0, "d")]


def test_clock_and_length_follow_the_heap() -> None:
    engine = Engine()
    assert engine.now == 0.0
    assert len(engine) == 0
    engine.schedule(7.5, 0, "a")
    engine.schedule(2.5, 0, "b")
    assert len(engine) == 2
    assert engine.pop() == "b"
    assert engine.now == 2.5
    assert len(engine) == 1
    assert engine.pop() == "a"
    assert engine.now == 7.5
    assert engine.pop() is None
    assert engine.now == 7.5  # popping an empty heap leaves the clock alone


def test_scheduling_in_the_past_raises_with_the_time() -> None:
    engine = Engine()
    engine.schedule(10.0, 0, "a")
    engine.pop()
    with pytest.raises(ValueError, match=r"t=9\.5.*now is 10\.0"):
        engine.schedule(9.5, 0, "late")
    assert len(engine) == 0  # nothing was pushed


@pytest.mark.parametrize("time", [math.nan, math.inf, -math.inf, -1.0])
def test_non_finite_or_negative_times_are_rejected(time: float) -> None:
    engine = Engine()
    with pytest.raises(ValueError, match=rf"t={time!r}"):
        engine.schedule(time, 0, "bad")
    assert len(engine) == 0
