"""Base scheduling policies: exact rankings on hand-built jobs, queue-crossing times, the Gittins
index, fair-share splits, the registry, and a battery every registered policy must pass."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalstop._validation import InvalidParameterError
from evalstop.schedulers import (
    LAS,
    SCHEDULERS,
    EvalStop,
    FairShare,
    Gittins,
    JobView,
    Scheduler,
    gittins_index,
    make_scheduler,
)

H = 3600.0


def job(
    job_id: int,
    *,
    tenant: int = 0,
    gpus: int = 1,
    arrival: float = 0.0,
    attained: float = 0.0,
    budget: float = 10 * H,
    running: bool = False,
) -> JobView:
    j = JobView(job_id, tenant, "rlhf", gpus, arrival, budget)
    j.attained_s = attained
    j.running = running
    return j


def ids(jobs: list[JobView]) -> list[int]:
    return [j.job_id for j in jobs]


def mixed_jobs() -> list[JobView]:
    """Queues under the default thresholds (1, 8, 64 GPU-h): 3, 5 -> q0; 1, 2 -> q1; 4 -> q3."""
    return [
        job(1, arrival=0.0, gpus=1, attained=2 * H, tenant=0),  # 2 GPU-h
        job(2, arrival=10.0, gpus=8, attained=0.5 * H, tenant=1, running=True),  # 4 GPU-h
        job(3, arrival=20.0, gpus=4, attained=0.0, tenant=0),
        job(4, arrival=5.0, gpus=2, attained=40 * H, tenant=1, running=True),  # 80 GPU-h
        job(5, arrival=30.0, gpus=1, attained=100.0, tenant=2),
    ]


# --- LAS -------------------------------------------------------------------------------------


def test_las_ranks_by_gpu_time_queue_then_arrival() -> None:
    assert ids(LAS().order(mixed_jobs(), now=0.0)) == [3, 5, 1, 2, 4]


@pytest.mark.parametrize(
    ("thresholds", "jobs", "expected"),
    [
        # Exactly on a threshold counts as crossed (number of thresholds <= attained GPU-s).
        ((100.0,), [job(1, arrival=0, attained=100.0), job(2, arrival=1, attained=99.0)], [2, 1]),
        # 2D: the wide job has less wall time but more GPU-time.
        ((100.0,), [job(1, arrival=0, gpus=4, attained=30.0), job(2, arrival=1, attained=60.0)], [2, 1]),
        # No thresholds: one queue, plain FIFO.
        ((), [job(1, arrival=5, attained=1e6), job(2, arrival=1)], [2, 1]),
        # Same queue, same arrival: job id breaks the tie.
        ((100.0,), [job(7, arrival=1), job(3, arrival=1)], [3, 7]),
    ],
)
def test_las_order_table(thresholds: tuple[float, ...], jobs: list[JobView], expected: list[int]) -> None:
    assert ids(LAS(thresholds).order(jobs, now=0.0)) == expected


@pytest.mark.parametrize(
    ("gpus", "attained", "expected"),
    [
        (4, 0.0, H / 4),  # next threshold 1 GPU-h over 4 GPUs
        (4, H / 4, 8 * H / 4),  # on the first threshold: next is 8 GPU-h
        (2, 1000.0, H / 2),
        (1, 63.9 * H, 64 * H),
        (1, 64 * H, None),  # last queue
        (8, 100 * H, None),
    ],
)
def test_las_next_change_s(gpus: int, attained: float, expected: float | None) -> None:
    assert LAS().next_change_s(job(1, gpus=gpus, attained=attained)) == expected


def test_las_is_preemptive_and_named() -> None:
    assert LAS.preemptive and LAS.name == "las"
    assert LAS().thresholds_gpu_s == (H, 8 * H, 64 * H)


@pytest.mark.parametrize("cls", [LAS, Gittins])
@pytest.mark.parametrize(
    ("thresholds", "match"),
    [
        ((2.0, 1.0), r"The 'thresholds_gpu_s' parameter of \w+ must be strictly increasing"),
        ((1.0, 1.0), r"must be strictly increasing\. Got \(1\.0, 1\.0\) instead\."),
        ((0.0,), r"The 'thresholds_gpu_s\[0\]' parameter of \w+ must be a finite number > 0\.0\. Got 0\.0"),
        ((1.0, float("inf")), r"'thresholds_gpu_s\[1\]' .* Got inf instead"),
        ("1,2", r"must be a sequence of numbers\. Got '1,2' instead"),
        (3600.0, r"must be a sequence of numbers\. Got 3600\.0 instead"),
    ],
)
def test_threshold_validation(cls: type[LAS | Gittins], thresholds: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        cls(thresholds_gpu_s=thresholds)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    gpus=st.integers(1, 64),
    attained=st.floats(0.0, 1e6, allow_nan=False),
    now=st.floats(0.0, 1e8, allow_nan=False),
)
def test_reaching_next_change_always_moves_the_job_up(gpus: int, attained: float, now: float) -> None:
    """The simulator reaches next_change_s by integrating time; rounding must not strand the job
    just below the threshold (which would schedule the same re-rank event forever)."""
    for policy in (LAS(), Gittins(sizes_gpu_s=[H, 10 * H])):
        j = job(1, gpus=gpus, attained=attained)
        target = policy.next_change_s(j)
        if target is None:
            assert policy.queue(j) == policy.n_queues - 1
            continue
        assert target > j.attained_s
        q = policy.queue(j)
        event_time = now + (target - j.attained_s)
        j.attained_s = j.attained_s + (event_time - now)
        assert policy.queue(j) == q + 1


# --- Gittins ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "attained", "min_quantum", "expected"),
    [
        ([2.0, 2.0, 10.0], 0.0, 0.0, 1 / 3),  # quantum 2: P = 2/3, E[min] = 2
        ([2.0, 2.0, 10.0], 1.0, 0.0, 2 / 3),  # remaining [1, 1, 9]: quantum 1 -> (2/3) / 1
        ([2.0, 2.0, 10.0], 2.0, 0.0, 1 / 8),  # sizes equal to a count as finished
        ([2.0, 2.0, 10.0], 10.0, 0.0, 0.0),  # outlived every sampled size
        ([2.0, 2.0, 10.0], 0.0, 3.0, 2 / 7),  # quantum 3: P = 2/3, E[min] = (2 + 2 + 3) / 3
        ([2.0, 2.0, 10.0], 0.0, 1.0, 1 / 3),  # quantum 1 finishes nothing; best is still 2
        ([2.0, 2.0, 10.0], 0.0, math.inf, 3 / 14),  # run to completion: 1 / mean
        ([5.0], 0.0, 0.0, 1 / 5),
        ([1.0, 4.0], 0.0, 0.0, 1 / 2),
    ],
)
def test_gittins_index_hand_computed(
    sizes: list[float], attained: float, min_quantum: float, expected: float
) -> None:
    assert gittins_index(np.sort(np.array(sizes)), attained, min_quantum) == pytest.approx(expected)


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.floats(0.1, 100.0), min_size=1, max_size=12),
    frac=st.floats(0.0, 1.0),
    min_quantum=st.floats(0.0, 150.0),
    extra=st.floats(0.0, 200.0),
)
def test_gittins_index_is_the_max_over_quanta_above_the_minimum(
    sizes: list[float], frac: float, min_quantum: float, extra: float
) -> None:
    s = np.sort(np.array(sizes))
    a = frac * float(s[-1])
    g = gittins_index(s, a, min_quantum)
    r = s[s > a] - a
    if r.size == 0:
        assert g == 0.0
        return

    def ratio(d: float) -> float:
        return float(np.mean(r <= d) / np.mean(np.minimum(r, d))) if d > 0 else 0.0

    assert ratio(min_quantum + extra) <= g * (1 + 1e-9)  # any allowed quantum does no better
    candidates = [min_quantum, *(float(d) for d in r if d >= min_quantum)]
    assert max(ratio(d) for d in candidates) == pytest.approx(g)


def test_gittins_equal_sizes_index_grows_with_attained_service() -> None:
    policy = Gittins(sizes_gpu_s=[10 * H] * 100, thresholds_gpu_s=(H, 2 * H, 4 * H))
    assert policy.queue_index == pytest.approx([1 / (10 * H), 1 / (9 * H), 1 / (8 * H), 1 / (6 * H)])
    jobs = [job(1, arrival=0), job(2, arrival=1, attained=1.5 * H), job(3, arrival=2, attained=5 * H)]
    assert ids(policy.order(jobs, now=0.0)) == [3, 2, 1]


def pareto_quantiles(n: int = 2000, alpha: float = 1.1, xm: float = 0.5 * H) -> np.ndarray:
    u = (np.arange(n) + 0.5) / n
    return xm * (1.0 - u) ** (-1.0 / alpha)


def test_gittins_heavy_tail_behaves_like_las() -> None:
    policy = Gittins(sizes_gpu_s=pareto_quantiles())
    g = policy.queue_index
    assert all(b < a for a, b in pairwise(g))  # decreasing index: LAS-like
    jobs = [job(1, arrival=0.0, gpus=2, attained=20 * H), job(2, arrival=50.0, gpus=4), job(3, arrival=60.0)]
    assert ids(policy.order(jobs, now=0.0)) == [2, 3, 1]
    assert ids(policy.order(jobs, now=0.0)) == ids(LAS().order(jobs, now=0.0))


def test_gittins_queue_width_quantum_ignores_a_sample_just_above_a_boundary() -> None:
    sizes = [H + 1.0] + [10 * H] * 99  # one size 1 GPU-s above the threshold
    raw = Gittins(sizes_gpu_s=sizes, thresholds_gpu_s=(H,), min_quantum_gpu_s=0.0)
    width = Gittins(sizes_gpu_s=sizes, thresholds_gpu_s=(H,))
    assert raw.queue_index[1] == pytest.approx(1 / 100)  # 1 / (m * r_1): the lucky neighbour rules
    assert width.queue_index[1] == pytest.approx(100 / (1.0 + 99 * 9 * H))  # last queue: 1 / mean
    assert width.queue_index[0] == pytest.approx(gittins_index(np.sort(sizes), 0.0, H))


def test_gittins_default_sample_is_seeded_and_private() -> None:
    state = np.random.get_state()[1].copy()  # type: ignore[index]
    a, b, c = Gittins(), Gittins(), Gittins(seed=1)
    assert np.array_equal(np.random.get_state()[1], state)  # type: ignore[index]
    assert a.queue_index == b.queue_index
    assert a.queue_index != c.queue_index
    assert a.sizes_gpu_s.size == 10_000
    assert np.median(a.sizes_gpu_s) == pytest.approx(2 * H, rel=0.1)


def test_gittins_from_budgets_and_mixed_queue_ties_are_fifo() -> None:
    budgets = [H, 3 * H, 20 * H, 200 * H]
    policy = Gittins.from_budgets(budgets, thresholds_gpu_s=(2 * H,))
    assert policy.queue_index == Gittins(sizes_gpu_s=budgets, thresholds_gpu_s=(2 * H,)).queue_index
    same_queue = [job(4, arrival=3.0), job(2, arrival=1.0), job(3, arrival=1.0)]
    assert ids(policy.order(same_queue, now=0.0)) == [2, 3, 4]
    assert Gittins.preemptive and Gittins.name == "gittins"


def test_gittins_next_change_s_matches_las() -> None:
    las, gittins = LAS(), Gittins()
    for j in mixed_jobs():
        assert gittins.next_change_s(j) == las.next_change_s(j)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes_gpu_s": []}, r"'sizes_gpu_s' parameter of Gittins must be a non-empty 1-D sequence"),
        ({"sizes_gpu_s": [[1.0, 2.0]]}, r"must be a non-empty 1-D sequence of numbers"),
        ({"sizes_gpu_s": ["a"]}, r"must be a non-empty 1-D sequence of numbers. Got \['a'\] instead"),
        ({"sizes_gpu_s": [1.0, float("nan")]}, r"'sizes_gpu_s\[1\]' parameter of Gittins .* Got nan"),
        ({"sizes_gpu_s": [1.0, 2.0, -3.0]}, r"'sizes_gpu_s\[2\]' .* must be a finite number > 0.0"),
        ({"seed": -1}, r"The 'seed' parameter of Gittins must be an int >= 0. Got -1 instead"),
        ({"seed": 1.5}, r"'seed' parameter of Gittins must be an int"),
        (
            {"min_quantum_gpu_s": -1.0},
            r"'min_quantum_gpu_s' parameter of Gittins must be a finite number >= 0",
        ),
    ],
)
def test_gittins_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        Gittins(**kwargs)  # type: ignore[arg-type]


# --- FairShare -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "jobs", "expected"),
    [
        # Equal weights alternate; share ties go to the tenant whose next job is older.
        (
            None,
            [job(i, tenant=0, arrival=i) for i in (1, 2, 3, 4)]
            + [job(5, tenant=1, arrival=10), job(6, tenant=1, arrival=11)],
            [1, 5, 2, 6, 3, 4],
        ),
        # Weight 2 vs 1: tenant 0 gets two GPUs per GPU of tenant 1.
        (
            {0: 2.0, 1: 1.0},
            [job(i, tenant=0, arrival=i - 1) for i in range(1, 7)]
            + [job(7, tenant=1, arrival=0.5), job(8, tenant=1, arrival=1.5), job(9, tenant=1, arrival=2.5)],
            [1, 7, 2, 8, 3, 4, 9, 5, 6],
        ),
        # GPUs, not jobs: one 4-GPU job of tenant 0 balances four 1-GPU jobs of tenant 1.
        (
            {},
            [job(1, tenant=0, gpus=4, arrival=0), job(2, tenant=0, gpus=4, arrival=1)]
            + [job(i, tenant=1, arrival=i - 1) for i in range(3, 8)],
            [1, 3, 4, 5, 6, 2, 7],
        ),
        # A tenant missing from weights weighs 1; tenant 5 weighs 3.
        (
            {5: 3.0},
            [job(i, tenant=5, arrival=i) for i in range(1, 6)]
            + [job(9, tenant=0, arrival=0.5), job(10, tenant=0, arrival=0.6)],
            [9, 1, 2, 3, 10, 4, 5],
        ),
    ],
)
def test_fairshare_order_table(
    weights: dict[int, float] | None, jobs: list[JobView], expected: list[int]
) -> None:
    assert ids(FairShare(weights).order(jobs, now=0.0)) == expected


def test_fairshare_prefix_splits_gpus_by_weight() -> None:
    jobs = [job(i, tenant=i % 2, arrival=float(i), gpus=2) for i in range(200)]
    ranked = FairShare({0: 3.0, 1: 1.0}).order(jobs, now=0.0)
    first = ranked[:40]  # 80 GPUs' worth
    gpus0 = sum(j.gpus for j in first if j.tenant == 0)
    gpus1 = sum(j.gpus for j in first if j.tenant == 1)
    assert (gpus0, gpus1) == (60, 20)


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({0: 0.0}, r"The 'weights\[0\]' parameter of FairShare must be a finite number > 0.0. Got 0.0"),
        ({1: float("nan")}, r"'weights\[1\]' parameter of FairShare .* Got nan instead"),
        ([1.0, 2.0], r"'weights' parameter of FairShare must be a mapping tenant -> weight"),
    ],
)
def test_fairshare_validation(weights: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        FairShare(weights)  # type: ignore[arg-type]


def test_fairshare_is_preemptive_and_named() -> None:
    assert FairShare.preemptive and FairShare.name == "fair"
    assert ids(FairShare().order([], now=0.0)) == []


# --- registry --------------------------------------------------------------------------------


def test_registry_names_match_classes() -> None:
    assert sorted(SCHEDULERS) == ["fair", "fifo", "gittins", "las", "srtf"]
    for name, cls in SCHEDULERS.items():
        assert cls.name == name
        assert make_scheduler(name).name == name
    with pytest.raises(TypeError):
        SCHEDULERS["x"] = LAS  # type: ignore[index]


def test_make_scheduler_passes_params() -> None:
    las = make_scheduler("las", thresholds_gpu_s=(10.0, 20.0))
    assert isinstance(las, LAS) and las.thresholds_gpu_s == (10.0, 20.0)
    fair = make_scheduler("fair", weights={1: 2.0})
    assert isinstance(fair, FairShare) and fair.weights == {1: 2.0}


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        (
            "lass",
            {},
            r"The 'name' parameter of make_scheduler must be one of 'fair', 'fifo', 'gittins', 'las', "
            r"'srtf'. Got 'lass' instead.",
        ),
        ("fifo", {"foo": 1},
         r"Unknown parameter\(s\) 'foo' for scheduler 'fifo'. Valid parameters: 'backfill'."),
        (
            "las",
            {"thresholds": (1.0,), "z": 2},
            r"Unknown parameter\(s\) 'thresholds', 'z' for scheduler 'las'. "
            r"Valid parameters: 'backfill', 'preemptive', 'promote_after_wait_ratio', "
            r"'promote_after_wait_s', 'thresholds_gpu_s'.",
        ),
        (
            "gittins",
            {"sizes": [1.0]},
            r"Valid parameters: 'backfill', 'min_quantum_gpu_s', 'preemptive', 'seed', 'sizes_gpu_s', "
            r"'thresholds_gpu_s'.",
        ),
        ("las", {"thresholds_gpu_s": (0.0,)}, r"'thresholds_gpu_s\[0\]' parameter of LAS"),
        ("las", {"promote_after_wait_s": -1.0}, r"'promote_after_wait_s' parameter of LAS must be a finite"),
    ],
)
def test_make_scheduler_errors(name: str, params: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        make_scheduler(name, **params)


# --- battery over every registered policy ------------------------------------------------------


def random_jobs(seed: int, n: int = 60) -> list[JobView]:
    rng = random.Random(seed)
    return [
        job(
            i,
            tenant=rng.randrange(4),
            gpus=rng.choice([1, 2, 4, 8]),
            arrival=float(rng.randrange(20)),  # repeated arrivals exercise the id tie-break
            attained=rng.choice([0.0, rng.uniform(0, 30 * H)]),
            budget=rng.uniform(0.5 * H, 40 * H),
            running=rng.random() < 0.5,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_policy_ranks_a_permutation_independent_of_input_order(name: str, seed: int) -> None:
    policy = make_scheduler(name)
    jobs = random_jobs(seed)
    before = list(jobs)
    ranked = policy.order(jobs, now=0.0)
    assert jobs == before  # input untouched
    assert sorted(ids(ranked)) == sorted(ids(jobs))
    shuffled = list(jobs)
    random.Random(seed + 100).shuffle(shuffled)
    assert ids(policy.order(shuffled, now=0.0)) == ids(ranked)
    for j in jobs:
        change = policy.next_change_s(j)
        assert change is None or change > j.attained_s


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_evalstop_forwards_every_base(name: str) -> None:
    base: Scheduler = make_scheduler(name)
    wrapped = EvalStop(make_scheduler(name))
    assert wrapped.preemptive == base.preemptive
    assert wrapped.name == f"evalstop({name})"
    for seed in (0, 1):
        jobs = random_jobs(seed)
        assert ids(wrapped.order(jobs, now=5.0)) == ids(base.order(jobs, now=5.0))
        assert [wrapped.next_change_s(j) for j in jobs] == [base.next_change_s(j) for j in jobs]
