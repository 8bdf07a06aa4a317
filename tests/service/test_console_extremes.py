"""Finite extremes (±1.8e308, denormals) in stored scores: the console's pages, charts and the
JSON API answer them (the chart's arithmetic used to overflow to inf and the job page was 500).
On SQLite and PostgreSQL, and a property test of the console's drawing over every rule."""

from __future__ import annotations

import math
import re
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalstop.detectors import REGISTRY, Eval, Monitor, OnDetect, parse_spec
from evalstop.service.console.charts import curve_charts
from evalstop.service.console.evidence import attempts, drawn
from evalstop.service.store import scores

from ._support import ADMIN, Api
from .test_console import sign_in

BIG = sys.float_info.max
TINY = 5e-324  # the smallest denormal
EXTREMES = [1.7e308, -1.7e308, TINY, -TINY, BIG, -BIG, 1e308, 2.2250738585072014e-308, 0.0, -1e308]
#: Every rule by its default spec, and some with parameters at the edges of what they take.
SPECS = [*REGISTRY, "evalstop:k=1,against=best,min_delta=1e100", "patience:patience=1", "cusum:sigma=1e-300",
         "noise-aware:sigma=1e100,z=3", "mann-kendall:min_window=3", "evalstop:k=2,against=best"]
#: Rules whose scores are stored directly rather than posted (none: every rule takes these
#: scores through ingest since its parameters and statistics are bounded; kept so a rule that
#: cannot is still tested on the console).
RAISING: set[str] = set()
NUMBER = re.compile(r'(?:points|cx|cy|x|y|x1|y1|x2|y2)="([^"]*)"')


def _coordinates_are_finite(html: str) -> None:
    for attr in NUMBER.findall(html):
        for value in re.split(r"[ ,]", attr):
            assert value == "" or math.isfinite(float(value)), attr


def _store_scores(api: Api, job_id: str, values: list[float]) -> None:
    """Store scores as ingest would, without running the rule (for rules that cannot take them)."""
    now = api.ctx.store.clock()
    with api.ctx.store.transaction() as conn:
        conn.execute(scores.insert(), [{"job_id": job_id, "metric": "eval_score", "step": i + 1, "value": v,
                                        "received_at": now} for i, v in enumerate(values)])


def test_extreme_scores_never_break_a_page_or_the_api(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    made = []
    for n, spec in enumerate(SPECS):
        job = api.job(token, detector=spec, name=f"extreme-{n}")
        values = EXTREMES[n % 3:] + EXTREMES[: n % 3]  # each job sees them in another order
        if parse_spec(spec).name in RAISING:
            _store_scores(api, job["id"], values)
        else:
            body = {"scores": [{"step": i + 1, "value": v} for i, v in enumerate(values)]}
            r = api.post(token, job["id"], body)
            assert r.status_code == 200, (spec, r.text)
        made.append(job["id"])
    rewinding = api.job(token, detector="evalstop:k=1", on_detect="rewind", max_rewinds=2,
                        correction="lr*=0.5")["id"]
    for step, value in [(1, BIG), (2, -BIG), (3, TINY), (4, -TINY)]:  # rewinds twice, then stops
        assert api.post(token, rewinding, {"step": step, "value": value}).status_code == 200
    made.append(rewinding)
    sign_in(api.client, ADMIN)
    for job_id in made:
        for path in (f"/ui/jobs/{job_id}", f"/ui/jobs/{job_id}?partial=live"):
            page = api.client.get(path)
            assert page.status_code == 200, (path, page.text[-500:])
            _coordinates_are_finite(page.text)
        for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/scores", f"/v1/jobs/{job_id}/decisions"):
            assert api.client.get(path, headers=api.as_(ADMIN)).status_code == 200, path
    wide = api.client.get(f"/ui/jobs/{rewinding}").text.split('id="narrow-curve"')[0]
    assert wide.count('class="marker-rewind"') == 2 and 'id="marker-stop" data-step="4"' in wide
    for sort in ("last_value", "decision", "last_step"):
        assert api.client.get("/ui/jobs", params={"sort": sort}).status_code == 200
    assert api.client.get("/ui/savings").status_code == 200
    for path in ("/v1/jobs", "/v1/reports/shadow", "/v1/reports/reclaimed"):
        assert api.client.get(path, headers=api.as_(ADMIN)).status_code == 200, path


finite = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EXTREMES)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SPECS), st.lists(finite, min_size=1, max_size=40), st.integers(0, 2))
def test_any_finite_scores_draw_under_every_rule(spec: str, values: list[float], max_rewinds: int) -> None:
    """What the job page draws, for any finite scores the service stores and any rewinds it made
    (folded here by ``evalstop:k=2`` with the rewind policy, moved out as the service does), under
    every rule: the evidence, its attempts and both drawings, every coordinate finite."""
    rewind = OnDetect(on_detect="rewind", max_rewinds=max_rewinds, correction="lr*=0.5")
    policy = rewind if max_rewinds else None
    monitor = Monitor("evalstop:k=2", policy=policy)
    kept: list[Eval] = []
    rewound: list[tuple[int, int, float]] = []
    step = 0
    for value in values:
        step += 1
        monitor.observe(Eval(step, value), f"ck/{step}")
        kept.append(Eval(step, value))
        if monitor.action == "rewind":  # as the service does: the evals after the best move out
            to = monitor.rewind().to_step
            later = [e for e in kept if to is not None and e.step > to]
            rewound += [(monitor.n_rewinds - 1, e.step, e.score) for e in later]
            kept = [e for e in kept if to is None or e.step <= to]
            step = step if to is None else to
    runs = attempts(kept, rewound, monitor.rewinds)
    assert sum(len(r) for r in runs) == len(values) and len(runs) == monitor.n_rewinds + 1
    evidence = drawn(parse_spec(spec), runs, monitor)
    html = str(curve_charts([[(e.step, e.score) for e in r] for r in runs], evidence,
                            best_step=evidence.verdict.best_step, stop_step=evidence.verdict.stop_step))
    _coordinates_are_finite(html)
    assert html.count("<svg") == 2 and html.count('class="marker-rewind"') == 2 * monitor.n_rewinds
