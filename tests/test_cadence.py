"""Eval cadence policies, the monitor's next-eval hint, and ``evalstop replay --cadence``."""

from __future__ import annotations

import csv
import io
import json

import pytest

from evalstop import replay
from evalstop.detectors import (
    Adaptive,
    CadenceWalk,
    Cusum,
    Eval,
    Every,
    KDeclines,
    Monitor,
    NextEval,
    format_cadence,
    parse_cadence,
    watch,
)
from evalstop.experiments import cadence_policy
from evalstop.experiments.holdout import Case
from evalstop.integrations._remote import _hint
from evalstop.replay import replay_rows

RISE_FALL = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2]


def dense(scores: list[float], interval: int = 10) -> list[Eval]:
    n = len(scores)
    return [Eval((i + 1) * interval, s, progress=(i + 1) / n) for i, s in enumerate(scores)]


@pytest.mark.parametrize(
    ("spec", "policy"),
    [
        ("every:3", Every(3)),
        ("every:n=2", Every(2)),
        ("every", Every(1)),
        ("adaptive", Adaptive()),
        ("adaptive:every=4,dense=2", Adaptive(4, 2)),
    ],
)
def test_specs_round_trip(spec: str, policy: object) -> None:
    assert parse_cadence(spec) == policy
    assert parse_cadence(format_cadence(parse_cadence(spec))) == policy


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("sometimes:3", "Unknown cadence 'sometimes'"),
        ("every:0", "The 'n' parameter of Every must be an int >= 1 and <= 10000. Got 0 instead."),
        ("every:x", "The 'n' parameter of cadence 'every' must be an int. Got 'x' instead."),
        ("adaptive:every=2,dense=3", "'dense' parameter of Adaptive must be <= every=2. Got 3"),
        ("adaptive:often=2", "Unknown parameter 'often' for cadence 'adaptive'"),
    ],
)
def test_bad_specs_name_the_parameter(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_cadence(spec)


def test_adaptive_asks_densely_only_while_the_latest_eval_is_below_the_best() -> None:
    monitor = Monitor(KDeclines(k=50), "adaptive:every=3", eval_interval=10)
    assert monitor.next_eval() == NextEval(after=3, step=30, elevated=False)
    hints = []
    for ev in dense([0.1, 0.3, 0.2, 0.25, 0.4]):
        monitor.observe(ev)
        hints.append(monitor.next_eval())
    expected = [(3, False), (3, False), (1, True), (1, True), (3, False)]
    assert [(h.after, h.elevated) for h in hints] == expected
    assert hints[2].step == 40 and hints[-1].step == 80
    assert hints[-1].to_dict() == {"after": 3, "step": 80, "elevated": False, "done": False}
    assert NextEval.from_dict(hints[-1].to_dict()) == hints[-1]


def test_next_eval_without_an_interval_counts_opportunities_only() -> None:
    monitor = Monitor(None, "every:2")
    monitor.observe(Eval(7, 0.5))
    assert monitor.next_eval() == NextEval(after=2, step=None, elevated=False)


def test_the_hint_says_done_once_fired() -> None:
    monitor = Monitor(KDeclines(k=1), "every:1")
    for ev in dense([0.5, 0.4]):
        monitor.observe(ev)
    assert monitor.fired and monitor.next_eval().done


def test_cadence_and_interval_survive_json_and_old_states_load() -> None:
    monitor = Monitor(Cusum(), "adaptive:every=4,dense=2", eval_interval=25)
    for ev in dense(RISE_FALL[:8]):
        monitor.observe(ev)
    back = Monitor.from_json(json.dumps(monitor.to_json(), allow_nan=False))
    assert back == monitor and back.next_eval() == monitor.next_eval()
    assert back.cadence == Adaptive(4, 2) and back.eval_interval == 25
    old = monitor.to_json()
    del old["cadence"], old["eval_interval"]  # saved before cadences existed
    assert Monitor.from_json(old).cadence == Every(1)


def test_bad_eval_interval_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'eval_interval' parameter of Monitor must be an int >= 1\. Got 0"):
        Monitor(None, None, eval_interval=0)


def test_watch_feeds_only_the_asked_evals() -> None:
    evals = dense(RISE_FALL)
    monitor = Monitor(KDeclines(k=50), "every:3")
    assert watch(monitor, evals) == [2, 5, 8, 11]
    adaptive = Monitor(KDeclines(k=2, against="best"), "adaptive:every=3")
    used = watch(adaptive, evals)
    # sparse while rising, dense from the first eval below the best, stops after 2 declines
    assert used == [2, 5, 8, 9]
    assert adaptive.fired and adaptive.verdict.stop_step == evals[9].step
    assert adaptive.verdict.best_step == evals[5].step


@pytest.mark.parametrize("cadence", ["every:1", "every:3", "adaptive:every=3", "adaptive:every=4,dense=2"])
def test_a_cadence_walk_offered_one_eval_at_a_time_takes_what_it_takes_over_the_list(cadence: str) -> None:
    # replay offers rows one by one, the simulator walks a list: the same evals, the same verdict
    evals = dense(RISE_FALL)
    rule = KDeclines(k=2, against="best")
    listed, offered = Monitor(rule, cadence), Monitor(rule, cadence)
    walk = CadenceWalk(offered)
    used = watch(listed, evals)
    taken = [i for i, ev in enumerate(evals) if walk.offer(ev)]
    assert taken == used and used
    assert offered.to_json() == listed.to_json()
    assert walk.seen == len(evals)


def test_the_walk_yields_each_index_before_folding_its_eval() -> None:
    monitor = Monitor(KDeclines(k=50), "every:2")
    seen = [(i, monitor.n_evals) for i in CadenceWalk(monitor).walk(dense(RISE_FALL))]
    assert seen == [(1, 0), (3, 1), (5, 2), (7, 3), (9, 4), (11, 5), (13, 6)]
    assert monitor.n_evals == 7


def curves_csv(jobs: dict[str, list[float]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["job_id", "step", "score"])
    for job, scores in jobs.items():
        for ev in dense(scores):
            writer.writerow([job, ev.step, ev.score])
    return out.getvalue()


def test_replay_with_a_cadence_agrees_with_watch_and_counts_evals() -> None:
    jobs = {"fall": RISE_FALL, "flat": [0.5, 0.51, 0.5, 0.52, 0.5, 0.51, 0.5, 0.52, 0.5]}
    rule = KDeclines(k=2, against="best")
    results = replay_rows(csv.DictReader(io.StringIO(curves_csv(jobs))), rule, cadence=Adaptive())
    for result, (job, scores) in zip(results, jobs.items(), strict=True):
        monitor = Monitor(rule, Adaptive())
        used = watch(monitor, dense(scores))
        assert result["job_id"] == job
        assert result["evals_used"] == len(used) == monitor.n_evals
        assert result["stop_step"] == monitor.verdict.stop_step
        assert result["best_step"] == monitor.verdict.best_step
    assert results[0]["stopped"] and results[0]["evals_used"] == 4


def test_replay_cli_cadence_column_only_when_asked(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "curves.csv"
    path.write_text(curves_csv({"a": RISE_FALL}))
    parser = __import__("argparse").ArgumentParser()
    replay.add_arguments(parser)
    args = parser.parse_args([str(path), "--detector", "evalstop:k=2,against=best"])
    assert args.run(args) == 0
    plain = capsys.readouterr().out
    assert plain.splitlines()[0] == "job_id,stopped,stop_step,best_step,best_score,reason"
    args = parser.parse_args([str(path), "--detector", "evalstop:k=2,against=best", "--cadence", "every:3"])
    assert args.run(args) == 0
    (header, row), = [list(csv.reader(io.StringIO(capsys.readouterr().out)))]
    assert header[-2:] == ["reason", "evals_used"]
    assert row[:5] + row[-1:] == ["a", "true", "120", "60", "0.6", "4"]
    args = parser.parse_args([str(path), "--cadence", "every:0"])
    assert args.run(args) == 2
    assert "The 'n' parameter of Every must be an int >= 1" in capsys.readouterr().err


def test_stderr_column_is_read_and_used_by_cusum() -> None:
    text = "job_id,step,score,stderr\n" + "".join(
        f"a,{i + 1},{s},{0.001 if i >= 6 else ''}\n" for i, s in enumerate(RISE_FALL[:9])
    )
    evals = replay.read_curves(csv.DictReader(io.StringIO(text)))["a"]
    assert evals[0].stderr is None and evals[7].stderr == 0.001
    # with a tiny stated standard error, the first drop below the best is many sds
    assert Cusum(n_warmup_evals=1).evaluate(evals).stop_index == 6
    # without it the online estimate (which the fall itself inflates) needs one more eval
    assert Cusum(n_warmup_evals=1).evaluate([Eval(e.step, e.score) for e in evals]).stop_index == 7


# ---- the study behind `evalstop validate`'s cadence tables -----------------------------------------


def case(job: str, family: str, label: str, scores: list[float], truth: list[float]) -> Case:
    peak = max(range(len(truth)), key=truth.__getitem__)
    return Case(job, family, label, tuple(dense(scores)), tuple(truth), peak)


def test_detectable_needs_two_evals_after_the_peak_and_a_drop_of_two_sds() -> None:
    fall = case("a", "base", "hacking", RISE_FALL, RISE_FALL)
    assert cadence_policy.detectable(fall, "every:1") and cadence_policy.detectable(fall, "every:3")
    late = [*RISE_FALL[:6], 0.3]  # one eval after the peak
    late_case = case("b", "base", "hacking", late, late)
    assert cadence_policy.detectable(late_case, "every:1") is False
    noisy = [0.5 + (0.2 if i % 2 else -0.2) for i in range(12)]
    small = case("c", "base", "hacking", noisy, [0.5] * 6 + [0.45] * 6)  # a drop of 0.05, sd ~0.2
    assert not cadence_policy.detectable(small, "every:1")


def test_run_case_maps_the_stop_and_checkpoint_back_to_dense_evals() -> None:
    fall = case("a", "base", "hacking", RISE_FALL, RISE_FALL)
    run = cadence_policy.run_case("evalstop:k=2,against=best", "adaptive:every=3,dense=1", fall)
    assert run == cadence_policy.Run(used=4, stop_index=9, delivered=5)
    flat = case("b", "base", "healthy", [0.5] * 9, [0.5] * 9)
    run = cadence_policy.run_case("evalstop:k=2,against=best", "every:3", flat)
    assert run == cadence_policy.Run(3, None, 8)


def test_leave_one_bank_out_never_scores_a_bank_with_a_spec_chosen_on_it() -> None:
    # numpy runs fall steeply (any k stops them); the TRL run wobbles (k=1 stops a healthy run)
    wobble = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.58, 0.62, 0.6, 0.64, 0.63, 0.66]
    cases = [case(f"n{i}", "base", "hacking", RISE_FALL, RISE_FALL) for i in range(3)]
    cases += [case("t0", "trl-proxy", "healthy", wobble, wobble)]
    report = cadence_policy.study("evalstop:k=1", ["evalstop:k=1", "evalstop:k=3"], cases)
    held = report["held_out"]
    assert held["chosen"] == {"numpy": "evalstop:k=3", "trl": "evalstop:k=1"}
    assert held["banks"]["trl"]["every:1"]["fpr"] == 1.0  # chosen on numpy alone, it fails TRL
    assert held["final"] in ("evalstop:k=1", "evalstop:k=3")
    assert "| trl | every:1 |" in cadence_policy.render(report)


def test_the_remote_client_reads_the_hint_of_a_reply() -> None:
    hint = Monitor(KDeclines(), "adaptive", eval_interval=5).next_eval()
    assert _hint(json.loads(json.dumps(hint.to_dict()))) == hint
    assert _hint(None) is None
    with pytest.warns(UserWarning, match="malformed next_eval hint"):
        assert _hint({"step": 3}) is None
