"""Confirmation evals in the Monitor: an alarm asks for a larger eval and stops only if it agrees."""

from __future__ import annotations

import json
import math

import pytest

from evalstop.detectors import Confirm, Eval, ItemEval, Monitor, NextEval, parse_confirm

RULE = "evalstop:k=1,against=best"  # fires at the first eval below the running best


def ev(step: int, score: float, stderr: float | None = 0.04) -> Eval:
    return Eval(step, score, progress=step / 10, stderr=stderr)


RISE = [ev(1, 0.5), ev(2, 0.6), ev(3, 0.7)]


def test_without_confirm_the_rule_stops_and_the_hint_has_no_confirm_key() -> None:
    monitor = Monitor(RULE)
    monitor.observe_many([*RISE, ev(4, 0.3)])
    assert monitor.verdict.stop_step == 4
    assert "confirm" not in monitor.next_eval().to_dict()
    assert monitor.evals_used == 4


def test_an_alarm_asks_for_a_confirmation_eval_of_four_routine_evals() -> None:
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many([*RISE, ev(4, 0.3)])
    assert not monitor.fired and not monitor.fired_now
    hint = monitor.next_eval()
    assert hint == NextEval(0, 4, True, False, confirm=4)
    assert hint.to_dict()["confirm"] == 4 and NextEval.from_dict(hint.to_dict()) == hint
    assert "alarm at step 4" in monitor.verdict.reason
    assert not monitor.accepts(5)
    monitor.observe(ev(5, 0.7))  # a routine eval while the alarm waits: ignored
    assert monitor.n_ignored == 1 and monitor.pending is not None


def test_a_noise_spike_is_cleared_by_a_confirmation_that_does_not_agree() -> None:
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many([*RISE, ev(4, 0.3)])
    # the 4x eval at step 4 says 0.69 +- 0.02 against the best 0.7 +- 0.04: z = 0.22
    verdict = monitor.observe_confirmation(ev(4, 0.69, stderr=0.02))
    assert not verdict.stopped and not monitor.fired_now and monitor.pending is None
    assert monitor.confirmations[-1]["agreed"] is False and "z=0.224 < 3" in monitor.confirmations[-1]["how"]
    # the rule goes on from its state before the spike: the spike is not one of its evals
    assert monitor.n_evals == 3 and monitor.accepts(5) and not monitor.accepts(4)
    monitor.observe_many([ev(5, 0.72), ev(6, 0.75)])
    assert not monitor.fired and monitor.verdict.best_step == 6
    # 6 routine evals (the spike too) + one confirmation of 4
    assert monitor.n_evals == 5 and monitor.evals_used == 6 + 4


def test_a_real_decline_is_confirmed_and_stopped_at_the_same_step() -> None:
    history = [*RISE, ev(4, 0.4), ev(5, 0.3)]
    plain = Monitor(RULE)
    plain.observe_many(history)
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many(history)  # eval 5 is ignored: the alarm at 4 waits
    verdict = monitor.observe_confirmation(ev(4, 0.41, stderr=0.02))  # z = 0.29 / 0.04472 = 6.48
    assert monitor.fired_now and verdict.stopped
    same = (plain.verdict.stop_step, plain.verdict.best_step)
    assert (verdict.stop_step, verdict.best_step) == same == (4, 3)
    assert verdict.reason.startswith(plain.verdict.reason)
    assert "confirmed (unpaired, z=6.48 >= 3)" in verdict.reason
    assert monitor.evals_used == 4 + 4 and monitor.next_eval().done


def test_the_best_without_stderr_is_taken_as_size_times_noisier_than_the_confirmation() -> None:
    # se_best = 0.02 * sqrt(4) = 0.04, so z = 0.29 / hypot(0.04, 0.02) as above
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many([ev(1, 0.5, None), ev(2, 0.6, None), ev(3, 0.7, None), ev(4, 0.4, None)])
    monitor.observe_confirmation(ev(4, 0.41, stderr=0.02))
    assert monitor.fired and "z=6.48" in monitor.verdict.reason


def test_paired_per_prompt_where_both_evals_have_items() -> None:
    # prompts of very different difficulty: unpaired the drop of 0.1 is lost in their spread
    best = (1.0, 0.0, 1.0, 0.0, 0.8, 0.2)
    drop = (0.10, 0.12, 0.08, 0.10, 0.11, 0.09)
    confirm_items = tuple(b - d for b, d in zip(best, drop, strict=True)) + (0.5,) * 18  # 4x the prompts
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many([ev(1, 0.2), ev(2, 0.4), ItemEval(3, sum(best) / 6, items=best), ev(4, 0.3)])
    monitor.observe_confirmation(ItemEval(4, sum(confirm_items) / 24, items=confirm_items))
    # paired on the 6 shared prompts: mean 0.1, sd 0.01414, se 0.005774, z = 17.3
    assert monitor.fired and "confirmed (paired on 6 items, z=17.3 >= 3)" in monitor.verdict.reason


def test_a_confirmation_that_cannot_be_tested_clears_the_alarm() -> None:
    for bad in (ev(4, math.nan, 0.02), ev(4, 0.3, None)):
        monitor = Monitor(RULE, confirm=Confirm())
        monitor.observe_many([*RISE, ev(4, 0.3)])
        monitor.observe_confirmation(bad)
        assert not monitor.fired and monitor.pending is None and monitor.confirmations[-1]["agreed"] is False


def test_a_confirmation_not_asked_for_is_ignored() -> None:
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many(RISE)
    monitor.observe_confirmation(ev(3, 0.1, 0.01))
    monitor.observe_many([ev(4, 0.3)])
    monitor.observe_confirmation(ev(5, 0.1, 0.01))  # another step than the alarm's
    assert monitor.n_ignored == 2 and monitor.pending is not None and not monitor.confirmations


def test_the_state_round_trips_mid_confirmation() -> None:
    monitor = Monitor(RULE, "adaptive:every=3,dense=1", 10, confirm=Confirm(size=8, z=2.5))
    monitor.observe_many([*RISE, ev(4, 0.4)])
    saved = json.dumps(monitor.to_json(), allow_nan=False)
    loaded = Monitor.from_json(saved)
    assert loaded == monitor and loaded.next_eval() == monitor.next_eval() == NextEval(0, 4, True, False, 8)
    assert loaded.verdict == monitor.verdict
    for m in (monitor, loaded):
        m.observe_confirmation(ev(4, 0.41, stderr=0.02))
    assert loaded == monitor and loaded.fired and loaded.evals_used == 4 + 8
    # after the confirmation too
    assert Monitor.from_json(json.dumps(loaded.to_json(), allow_nan=False)) == loaded


def test_a_corrupt_pending_alarm_is_refused() -> None:
    monitor = Monitor(RULE, confirm=Confirm())
    monitor.observe_many([*RISE, ev(4, 0.4)])
    data = monitor.to_json()
    with pytest.raises(ValueError, match="pending alarm must be a dict"):
        Monitor.from_json({**data, "pending": [1, 2]})
    with pytest.raises(ValueError, match="must have the keys"):
        Monitor.from_json({**data, "pending": {**data["pending"], "state": {"n": 1}}})


def test_a_state_saved_without_confirmations_loads_without_them() -> None:
    monitor = Monitor(RULE)
    monitor.observe_many(RISE)
    data = monitor.to_json()
    for key in ("confirm", "pending", "best_ref", "confirmations"):
        del data[key]
    assert Monitor.from_json(data) == monitor


@pytest.mark.parametrize(
    ("spec", "message"),
    [("size=0", "'size' parameter of Confirm must be an int >= 1 and <= 100. Got 0"),
     ("z=-1", "'z' parameter of Confirm"),
     ("size=101", "'size' parameter of Confirm must be an int >= 1 and <= 100. Got 101"),
     ("n=3", "size=INT and z=FLOAT. Got 'n=3'"),
     ("size=x", "must be a number. Got 'x'")],
)
def test_bad_confirmation_parameters_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_confirm(spec)


def test_confirm_spec_defaults() -> None:
    assert parse_confirm("") == Confirm(4, 3.0) and parse_confirm("size=8,z=2") == Confirm(8, 2.0)


def test_a_cadence_walk_answers_each_alarm_before_it_moves_on() -> None:
    from evalstop.detectors import CadenceWalk

    history = [*RISE, ev(4, 0.3), ev(5, 0.72), ev(6, 0.75), ev(7, 0.76), ev(8, 0.4)]
    answers = {4: ev(4, 0.69, 0.02), 8: ev(8, 0.41, 0.02)}  # a spike, then a real fall
    monitor = Monitor(RULE, "every:1", confirm=Confirm())
    used = list(CadenceWalk(monitor, lambda e: answers[e.step]).walk(history))
    assert used == list(range(8)) and monitor.verdict.stop_step == 8
    assert [c["agreed"] for c in monitor.confirmations] == [False, True]
    assert monitor.evals_used == 8 + 2 * 4


def test_a_cadence_walk_with_no_confirmation_source_stops_at_the_alarm() -> None:
    from evalstop.detectors import watch

    monitor = Monitor(RULE, confirm=Confirm())
    assert watch(monitor, [*RISE, ev(4, 0.3), ev(5, 0.72)]) == [0, 1, 2, 3]
    assert monitor.pending is not None and not monitor.fired
