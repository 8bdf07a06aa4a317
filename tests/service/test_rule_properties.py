"""Every rule spec and cadence the parser accepts runs in the service: registration agrees with
the parser (201 exactly when it accepts), and 1,000 evals of random and extreme finite scores
(+-1e308, denormals, 0, repeats) go through the ingest path and the job reads without a 500,
on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalstop.detectors import parse_cadence, parse_spec
from evalstop.service.app import create_app
from test_spec_properties import EXTREME_SCORES, cadences, specs

from ._support import ADMIN, Api, make_settings

pytestmark = pytest.mark.slow


@pytest.fixture
def env(db_url: str) -> Iterator[tuple[Api, str]]:
    with TestClient(create_app(make_settings(db_url, tenant_scores_per_s=1e9, tenant_burst=10**9))) as client:
        api = Api(client)
        yield api, api.tenant("props")


def _parses(spec: str, cadence: str) -> bool:
    try:
        detector = parse_spec(spec)
        parse_cadence(cadence)
    except ValueError:
        return False
    return all(getattr(detector, p) <= 256 for p in detector.size_params)  # rule_max_window


FINITE = st.floats(allow_nan=False, allow_infinity=False)
SCORES = st.lists(st.one_of(st.sampled_from(EXTREME_SCORES), FINITE),
                  min_size=10, max_size=10)


def test_every_accepted_spec_runs_through_ingest(env: tuple[Api, str]) -> None:
    api, token = env
    made = [0]

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(spec=specs(), cadence=cadences(), values=SCORES, rewind=st.booleans())
    def check(spec: str, cadence: str, values: list[float], rewind: bool) -> None:
        made[0] += 1
        body: dict[str, Any] = {"external_ref": f"p-{made[0]}", "target": "recording", "detector": spec[:500],
                                "cadence": cadence[:200], "eval_interval": 2**53}
        if rewind:
            body.update(on_detect="rewind", correction="lr*=0.5", max_rewinds=3)
        r = api.client.post("/v1/jobs", json=body, headers=api.as_(token))
        assert r.status_code < 500, (spec, cadence, r.text[:300])
        assert (r.status_code == 201) == _parses(spec, cadence), (spec, cadence, r.text[:300])
        if r.status_code != 201:
            return
        job_id = r.json()["id"]
        step, attempt = 0, 0
        for chunk in range(4):
            batch = []
            for i in range(250):
                value = values[(chunk * 250 + i) % len(values)]
                step += 1
                batch.append({"step": step, "value": value, "loss": values[i % len(values)],
                              "score_stderr": abs(value), "progress": min(step / 1000, 1.0),
                              "attempt": attempt, "checkpoint_uri": f"s3://c/{step}"})
            r = api.post(token, job_id, {"scores": batch})
            assert r.status_code == 200, (spec, cadence, r.status_code, r.text[:300])
            attempt = r.json()["attempt"]
        for who in (token, ADMIN):
            for path in (f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/jobs/{job_id}/scores",
                         f"/v1/jobs/{job_id}/decisions"):
                got = api.client.get(path, headers=api.as_(who))
                assert got.status_code == 200, (spec, path, got.text[:300])

    check()
