"""The simulator's event logs and outcomes against hashes stored from the code before issue 10's
speed work (commit 40a61a2): a grid of every scheduler, with and without EvalStop (the batch
k-declines plan and the default rule's per-job monitors), both eval paths, no run quantum and a
300 s one, the paper and realistic presets at offered loads 0.8 and 1.3 on a small congested
cluster, FIFO/SJF strict and backfilling, LAS with its starvation guard, and the oracle. Every
fourth spec of the 448-spec grid is kept here (the rest take too long for a unit test).

A hash covers the event-log digest, the run totals and every outcome column, bit for bit. A
mismatch means the simulator's behaviour changed: if that is deliberate (a workload generator
or a policy that changed on purpose), rerun ``python tests/test_sim_equivalence.py`` to print
new hashes, and say why in the commit.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from evalstop.detectors import KDeclines
from evalstop.schedulers import FIFO, LAS, EvalStop, FairShare, Gittins, Scheduler, SRTFEst
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.sim.outcome import SimResult
from evalstop.workloads import PRESETS, Workload, generate

BASES: dict[str, Callable[[], Scheduler]] = {
    "fifo": lambda: FIFO(), "fifo_bf": lambda: FIFO(backfill=True),
    "sjf": lambda: SRTFEst(preemptive=False, backfill=False), "sjf_bf": lambda: SRTFEst(preemptive=False),
    "srtf": lambda: SRTFEst(), "srtf_strict": lambda: SRTFEst(backfill=False),
    "srtf_gw": lambda: SRTFEst(gpu_weighted=True),
    "las": lambda: LAS(), "las_guard": lambda: LAS(promote_after_wait_s=6 * 3600.0),
    "gittins": lambda: Gittins(), "fair": lambda: FairShare(),
}
WRAPS: dict[str, Callable[[Scheduler], Scheduler]] = {
    "plain": lambda b: b,
    "es_kd": lambda b: EvalStop(b, KDeclines(against="best")),
    "es_def": lambda b: EvalStop(b),
}
Spec = tuple[str, float, Callable[[], Scheduler], SimConfig]


def grid() -> Iterator[tuple[str, Spec]]:
    """Every spec of the full grid, named preset/load/base/wrap/path/min_run_s (or .../oracle/...)."""
    for preset, load in itertools.product(("paper", "realistic"), (0.8, 1.3)):
        for (base, make), (wrap, apply) in itertools.product(BASES.items(), WRAPS.items()):
            paths = ("fast",) if wrap == "plain" else ("fast", "events")
            for path, min_run in itertools.product(paths, (0.0, 300.0)):
                scheduler = functools.partial(lambda m, a: a(m()), make, apply)
                config = SimConfig(eval_path=path, min_run_s=min_run)
                yield f"{preset}/{load}/{base}/{wrap}/{path}/{min_run}", (preset, load, scheduler, config)
        for min_run in (0.0, 300.0):
            config = SimConfig(oracle=True, min_run_s=min_run)
            yield f"{preset}/{load}/oracle/{min_run}", (preset, load, SRTFEst, config)


@functools.cache
def workload(preset: str, load: float) -> Workload:
    return generate(PRESETS[preset].with_(n_jobs=240, total_gpus=24, offered_load=load), 3)


def result_hash(result: SimResult) -> str:
    sha = hashlib.sha256(result.event_log_hash.encode())
    sha.update(repr((result.policy, result.seed, result.total_gpus, result.makespan_s)).encode())
    columns = result.columns
    for name in sorted(columns):
        column = columns[name]
        sha.update(name.encode())
        if column.dtype == object:
            sha.update("\0".join(map(str, column.tolist())).encode())
        else:
            sha.update(str(column.dtype).encode())
            sha.update(np.ascontiguousarray(column).tobytes())
    return sha.hexdigest()[:16]


def run(spec: Spec) -> str:
    preset, load, scheduler, config = spec
    return result_hash(simulate(workload(preset, load), scheduler(), config))


SPECS = dict(grid())
#: Hashes of every fourth spec, computed with the simulator as it was at commit 40a61a2.
STORED = {
    "paper/0.8/fifo/plain/fast/0.0": "42675f3e480e487c",
    "paper/0.8/fifo/es_kd/events/0.0": "930f1a79c31935c7",
    "paper/0.8/fifo/es_def/events/0.0": "7f0ddfccc37336c3",
    "paper/0.8/fifo_bf/es_kd/fast/0.0": "87649c1a24456081",
    "paper/0.8/fifo_bf/es_def/fast/0.0": "6bcd973b9303707c",
    "paper/0.8/sjf/plain/fast/0.0": "f7cb0346951894f9",
    "paper/0.8/sjf/es_kd/events/0.0": "520fcf6864de7417",
    "paper/0.8/sjf/es_def/events/0.0": "e4dcff3a476b97ae",
    "paper/0.8/sjf_bf/es_kd/fast/0.0": "247fc2e2ee72acc0",
    "paper/0.8/sjf_bf/es_def/fast/0.0": "a656fddb251413de",
    "paper/0.8/srtf/plain/fast/0.0": "c2a1d1d0716c37f2",
    "paper/0.8/srtf/es_kd/events/0.0": "55d041a6eeab774a",
    "paper/0.8/srtf/es_def/events/0.0": "888cf2c05df5beae",
    "paper/0.8/srtf_strict/es_kd/fast/0.0": "f20f44a72014baf6",
    "paper/0.8/srtf_strict/es_def/fast/0.0": "0e37e96d0ad46f83",
    "paper/0.8/srtf_gw/plain/fast/0.0": "16af93ef9205d54a",
    "paper/0.8/srtf_gw/es_kd/events/0.0": "aa648870248f8a3f",
    "paper/0.8/srtf_gw/es_def/events/0.0": "d8e1515f7b3edb2c",
    "paper/0.8/las/es_kd/fast/0.0": "f3d21f255ec4767b",
    "paper/0.8/las/es_def/fast/0.0": "1335ed8ad9507573",
    "paper/0.8/las_guard/plain/fast/0.0": "0cd9688491c8f7c6",
    "paper/0.8/las_guard/es_kd/events/0.0": "fb0865696b66d0ab",
    "paper/0.8/las_guard/es_def/events/0.0": "1ac576b6609bd4df",
    "paper/0.8/gittins/es_kd/fast/0.0": "336e5cdf3de3a505",
    "paper/0.8/gittins/es_def/fast/0.0": "63fe9d4e8e8d13f6",
    "paper/0.8/fair/plain/fast/0.0": "2f0e733a1403d41e",
    "paper/0.8/fair/es_kd/events/0.0": "f4af76716795c038",
    "paper/0.8/fair/es_def/events/0.0": "e0a333db73733523",
    "paper/1.3/fifo/plain/fast/0.0": "348540d2e2be4021",
    "paper/1.3/fifo/es_kd/events/0.0": "60c3b8b2b64fcd2c",
    "paper/1.3/fifo/es_def/events/0.0": "e4d51879c4aa6013",
    "paper/1.3/fifo_bf/es_kd/fast/0.0": "54dfb8af5beb1cb3",
    "paper/1.3/fifo_bf/es_def/fast/0.0": "1c4443e63d7cbd3a",
    "paper/1.3/sjf/plain/fast/0.0": "a517b24ab1fd7ee1",
    "paper/1.3/sjf/es_kd/events/0.0": "f419728c217049db",
    "paper/1.3/sjf/es_def/events/0.0": "f76831a9193af63e",
    "paper/1.3/sjf_bf/es_kd/fast/0.0": "2735022e67a5eb99",
    "paper/1.3/sjf_bf/es_def/fast/0.0": "3bc0672f8653db27",
    "paper/1.3/srtf/plain/fast/0.0": "c64f1fc07208096c",
    "paper/1.3/srtf/es_kd/events/0.0": "3062c6eb37c1fafa",
    "paper/1.3/srtf/es_def/events/0.0": "a4f07dadbeb4ea40",
    "paper/1.3/srtf_strict/es_kd/fast/0.0": "b910302b6854157a",
    "paper/1.3/srtf_strict/es_def/fast/0.0": "48c5ab15b94b543e",
    "paper/1.3/srtf_gw/plain/fast/0.0": "e7ef5fe9f75ee842",
    "paper/1.3/srtf_gw/es_kd/events/0.0": "5972c06a08eb5eb0",
    "paper/1.3/srtf_gw/es_def/events/0.0": "c9792a5d177b1d45",
    "paper/1.3/las/es_kd/fast/0.0": "9c7c6ff5dd33254b",
    "paper/1.3/las/es_def/fast/0.0": "2c68e8c50aeaf9e0",
    "paper/1.3/las_guard/plain/fast/0.0": "f8d687298d6cccd4",
    "paper/1.3/las_guard/es_kd/events/0.0": "f27538a4dd901758",
    "paper/1.3/las_guard/es_def/events/0.0": "b6171ea2247e1c17",
    "paper/1.3/gittins/es_kd/fast/0.0": "65b5c6d51ebc6f53",
    "paper/1.3/gittins/es_def/fast/0.0": "18a8119e038c6966",
    "paper/1.3/fair/plain/fast/0.0": "d8d87fbe55e77cd6",
    "paper/1.3/fair/es_kd/events/0.0": "9b894e5644f311a0",
    "paper/1.3/fair/es_def/events/0.0": "0c700099673a1d87",
    "realistic/0.8/fifo/plain/fast/0.0": "42675f3e480e487c",
    "realistic/0.8/fifo/es_kd/events/0.0": "4bcb740722dbbf76",
    "realistic/0.8/fifo/es_def/events/0.0": "4741394fc3ceb481",
    "realistic/0.8/fifo_bf/es_kd/fast/0.0": "f5d3122cecd40cea",
    "realistic/0.8/fifo_bf/es_def/fast/0.0": "56df26b60ed5c029",
    "realistic/0.8/sjf/plain/fast/0.0": "f7cb0346951894f9",
    "realistic/0.8/sjf/es_kd/events/0.0": "fb55bf18648dfed0",
    "realistic/0.8/sjf/es_def/events/0.0": "208825f2380cc78c",
    "realistic/0.8/sjf_bf/es_kd/fast/0.0": "97f6e2524949e7cd",
    "realistic/0.8/sjf_bf/es_def/fast/0.0": "70903f73e53a93b4",
    "realistic/0.8/srtf/plain/fast/0.0": "c2a1d1d0716c37f2",
    "realistic/0.8/srtf/es_kd/events/0.0": "81bea55f0ec96a62",
    "realistic/0.8/srtf/es_def/events/0.0": "c3249e43f6fc2376",
    "realistic/0.8/srtf_strict/es_kd/fast/0.0": "acf4ad109855c9ee",
    "realistic/0.8/srtf_strict/es_def/fast/0.0": "d2b5f288bd0f61e2",
    "realistic/0.8/srtf_gw/plain/fast/0.0": "16af93ef9205d54a",
    "realistic/0.8/srtf_gw/es_kd/events/0.0": "5fdccf11503981c3",
    "realistic/0.8/srtf_gw/es_def/events/0.0": "7c5d60d30d297d15",
    "realistic/0.8/las/es_kd/fast/0.0": "2c57d4599fb65f4b",
    "realistic/0.8/las/es_def/fast/0.0": "822fc22c31d335f0",
    "realistic/0.8/las_guard/plain/fast/0.0": "0cd9688491c8f7c6",
    "realistic/0.8/las_guard/es_kd/events/0.0": "2c57d4599fb65f4b",
    "realistic/0.8/las_guard/es_def/events/0.0": "1420641109683c7b",
    "realistic/0.8/gittins/es_kd/fast/0.0": "31544b040a994996",
    "realistic/0.8/gittins/es_def/fast/0.0": "172043842f4a3ce7",
    "realistic/0.8/fair/plain/fast/0.0": "2f0e733a1403d41e",
    "realistic/0.8/fair/es_kd/events/0.0": "98571288a20b3e5d",
    "realistic/0.8/fair/es_def/events/0.0": "4f299af31aa4b34e",
    "realistic/1.3/fifo/plain/fast/0.0": "348540d2e2be4021",
    "realistic/1.3/fifo/es_kd/events/0.0": "ac769f499a1f105c",
    "realistic/1.3/fifo/es_def/events/0.0": "e9d88401624e1564",
    "realistic/1.3/fifo_bf/es_kd/fast/0.0": "4ee1bb4870808bdb",
    "realistic/1.3/fifo_bf/es_def/fast/0.0": "816eac50f78c6303",
    "realistic/1.3/sjf/plain/fast/0.0": "a517b24ab1fd7ee1",
    "realistic/1.3/sjf/es_kd/events/0.0": "b1f74ec17be0021a",
    "realistic/1.3/sjf/es_def/events/0.0": "a9419694f5ecff6f",
    "realistic/1.3/sjf_bf/es_kd/fast/0.0": "f9a7f74e9698a408",
    "realistic/1.3/sjf_bf/es_def/fast/0.0": "49893c7e45eb8d1d",
    "realistic/1.3/srtf/plain/fast/0.0": "c64f1fc07208096c",
    "realistic/1.3/srtf/es_kd/events/0.0": "47758b496314ec65",
    "realistic/1.3/srtf/es_def/events/0.0": "02ee2dcc92b3811c",
    "realistic/1.3/srtf_strict/es_kd/fast/0.0": "50e17cd3bd29bf71",
    "realistic/1.3/srtf_strict/es_def/fast/0.0": "f1b019d1098db6da",
    "realistic/1.3/srtf_gw/plain/fast/0.0": "e7ef5fe9f75ee842",
    "realistic/1.3/srtf_gw/es_kd/events/0.0": "52400ac45fa193a8",
    "realistic/1.3/srtf_gw/es_def/events/0.0": "e26f5d39508e41d1",
    "realistic/1.3/las/es_kd/fast/0.0": "937cb1ceffe2c5d9",
    "realistic/1.3/las/es_def/fast/0.0": "0fe72ddfcd3cbde7",
    "realistic/1.3/las_guard/plain/fast/0.0": "f8d687298d6cccd4",
    "realistic/1.3/las_guard/es_kd/events/0.0": "d462131d1c92aca1",
    "realistic/1.3/las_guard/es_def/events/0.0": "7a4ae6c8d578df73",
    "realistic/1.3/gittins/es_kd/fast/0.0": "806da8a720ce55eb",
    "realistic/1.3/gittins/es_def/fast/0.0": "d3e6583543cc4745",
    "realistic/1.3/fair/plain/fast/0.0": "d8d87fbe55e77cd6",
    "realistic/1.3/fair/es_kd/events/0.0": "dc500503b2c0067e",
    "realistic/1.3/fair/es_def/events/0.0": "f5d21f6bb7e75290",
}


def test_the_stored_specs_are_every_fourth_of_the_grid() -> None:
    assert list(STORED) == list(SPECS)[::4]


@pytest.mark.parametrize("name", list(STORED))
def test_event_log_and_outcomes_unchanged(name: str) -> None:
    assert run(SPECS[name]) == STORED[name]


if __name__ == "__main__":
    for name in list(SPECS)[::4]:
        print(f'    "{name}": "{run(SPECS[name])}",')
