"""Values a tenant may send that were accepted and then broke something: each is a 4xx naming
the field and its limit, on SQLite and PostgreSQL, and nothing stored earlier breaks a read."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa

from evalstop.service.store.tables import jobs

from ._support import ADMIN, Api


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _register(api: Api, token: str, **body: Any) -> Any:
    payload = {"external_ref": f"v-{len(body)}-{id(body)}", "target": "recording", **body}
    return api.client.post("/v1/jobs", json=payload, headers=api.as_(token))


@pytest.mark.parametrize(("options", "message"), [
    (_nested(900), "target_options: nests deeper than 32 levels (the limit)."),
    (_nested(33), "target_options: nests deeper than 32 levels (the limit)."),
    ({"x": "a" * 900_000}, "over the service's limit of 65536 (setting max_options_bytes"),
    ({"x": ["a" * 1000] * 70}, "target_options: takes 70"),
    ({"x": "a\x00b"}, "target_options: a value holds a NUL character"),
])
def test_target_options_past_its_bounds_is_422_naming_the_field_and_limit(
    api_any_db: Api, options: dict[str, Any], message: str
) -> None:
    api = api_any_db
    token = api.tenant("acme")
    r = _register(api, token, target_options=options)
    assert r.status_code == 422 and message in r.json()["detail"], r.text[:300]
    assert _register(api, token, target_options=_nested(32)).status_code == 201
    for who in (token, ADMIN):
        assert api.client.get("/v1/jobs", headers=api.as_(who)).status_code == 200


def test_a_deep_value_stored_before_the_bounds_does_not_break_the_listing(api_any_db: Api) -> None:
    """A database written by an older service may hold one: its tenant and the operator still
    list their jobs (the value is shown as a note), and the other tenant's job is intact."""
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token)
    other = api.tenant("other")
    kept = api.job(other, target_options={"queue": "gpu"})
    with api.ctx.store.transaction() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job["id"]).values(target_options=_nested(900),
                                                                         resubmit=_nested(900)))
    for who in (token, ADMIN):
        r = api.client.get("/v1/jobs", headers=api.as_(who))
        assert r.status_code == 200, r.text[:300]
        shown = {j["id"]: j for j in r.json()}
        assert "unreadable" in shown[job["id"]]["target_options"]
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).status_code == 200
    r = api.client.get("/v1/jobs", headers=api.as_(other)).json()
    assert [j["target_options"] for j in r] == [{"queue": "gpu"}] and r[0]["id"] == kept["id"]


@pytest.mark.parametrize(("spec", "msg"), [
    ("noise-aware:n_items=1" + "0" * 400, "n_items' parameter of NoiseAware must be an int >= 0 and <= "),
    ("mann-kendall:alpha=1e-17", "'alpha' parameter of MannKendall must be a finite number >= 1e-12"),
    ("paired:alpha=1e-17", "'alpha' parameter of Paired must be a finite number >= 1e-12"),
    ("cusum:hold=1e-400", "'hold' parameter of cusum: 1e-400 is too small to be told from 0"),
    ("evalstop:k=1" + "0" * 400, "'k' parameter of KDeclines must be an int >= 1 and <= 1000000"),
    ("patience:patience=1" + "0" * 400, "'patience' parameter of Patience must be an int >= 1 and <= "),
    ("noise-aware:k=1" + "0" * 400, "'k' parameter of NoiseAware must be an int >= 1 and <= 1000000"),
    ("cusum:threshold=1e308,drift=1e308", "'threshold' parameter of Cusum must be a finite number > 0.0"),
])
def test_rule_parameters_out_of_range_are_422_with_the_range(api_any_db: Api, spec: str, msg: str) -> None:
    api = api_any_db
    token = api.tenant("acme")
    r = _register(api, token, detector=spec[:500])
    assert r.status_code == 422 and msg in r.json()["detail"], r.text[:300]


def test_a_cadence_past_its_range_is_422_on_both_databases(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    for cadence in ("every:" + "9" * 194, "every:10001", "adaptive:every=20000"):
        r = _register(api, token, cadence=cadence, eval_interval=2**53)
        assert r.status_code == 422, r.text[:300]
        assert "must be an int >= 1 and <= 10000" in r.json()["detail"]
    r = _register(api, token, cadence="every:10000", eval_interval=2**53)
    assert r.status_code == 201 and r.json()["next_eval"]["step"] == 10000 * 2**53


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/tenants/acme/token/revoke", {"reason": "leaked\x00"}, "reason"),
    ("/v1/tenants/acme/token/rotate", {"reason": "\x00"}, "reason"),
    ("/v1/tenants/acme/token/rotate", {"grace_s": "5"}, "grace_s"),
    ("/v1/tenants/acme/token/rotate", {"grace_s": True}, "grace_s"),
    ("/v1/tenants/acme/shadow", {"enabled": "yes"}, "enabled"),
])
def test_token_and_tenant_bodies_refuse_nul_and_wrong_types(
    api_any_db: Api, path: str, body: dict[str, Any], field: str
) -> None:
    api = api_any_db
    api.tenant("acme")
    send = api.client.put if path.endswith("shadow") else api.client.post
    r = send(path, json=body, headers=api.as_(ADMIN))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field], r.text[:300]


@pytest.mark.parametrize(("body", "field"), [
    ({"max_rewinds": int("4" * 4000)}, "max_rewinds"),
    ({"max_rewinds": 1001, "on_detect": "rewind", "correction": "lr*=0.5"}, "max_rewinds"),
    ({"grace_period_s": "5"}, "grace_period_s"),
    ({"shadow": "true"}, "shadow"),
    ({"external_ref": "a\x00b"}, "external_ref"),
    ({"name": "\x00"}, "name"),
    ({"metric": "m\x00"}, "metric"),
    ({"detector": "evalstop:k=2\x00"}, "detector"),
])
def test_registration_refuses_wrong_types_nul_and_huge_numbers(
    api_any_db: Api, body: dict[str, Any], field: str
) -> None:
    api = api_any_db
    token = api.tenant("acme")
    r = _register(api, token, **body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field], r.text[:300]


# -- a batch holding a late score of an earlier attempt -----------------------------------------
REWIND = {"on_detect": "rewind", "correction": "kl_coef*=2", "max_rewinds": 2}


def _rewound_job(api: Api, token: str) -> str:
    job = api.job(token, **REWIND)
    pairs = [(1, 0.5), (2, 0.7), (3, 0.6), (4, 0.5)]
    batch = [{"step": s, "value": v, "checkpoint_uri": f"s3://c/{s}"} for s, v in pairs]
    reply = api.post(token, job["id"], {"scores": batch}).json()
    assert (reply["decision"], reply["attempt"], reply["rewind"]["to_step"]) == ("rewind", 1, 2)
    return str(job["id"])


def test_a_current_score_after_a_stale_one_is_judged_on_its_own(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job_id = _rewound_job(api, token)
    body = {"scores": [{"step": 7, "value": 0.1, "attempt": 0}, {"step": 3, "value": 0.8, "attempt": 1}]}
    r = api.post(token, job_id, body)
    assert r.status_code == 200, r.text
    reply = r.json()
    got = (reply["decision"], reply["accepted"], reply["duplicates"], reply["stale"], reply["best_step"])
    assert got == ("continue", 1, 1, [0], 3)
    scores = api.client.get(f"/v1/jobs/{job_id}/scores", headers=api.as_(token)).json()
    assert [(s["step"], s["value"]) for s in scores] == [(1, 0.5), (2, 0.7), (3, 0.8)]
    # only stale scores: the reply repeats the rewind, as before
    late = api.post(token, job_id, {"scores": [{"step": 9, "value": 0.1, "attempt": 0}]}).json()
    assert (late["decision"], late["stale"], late["accepted"]) == ("rewind", [0], 0)
    # the current attempt's own order still holds, and names the item in the request
    r = api.post(token, job_id, {"scores": [{"step": 8, "value": 0.1, "attempt": 0},
                                            {"step": 6, "value": 0.8, "attempt": 1},
                                            {"step": 5, "value": 0.8}]})
    assert r.status_code == 409 and "scores[2]: step 5" in r.json()["detail"], r.text
    # a score ahead of the job is still a 409 naming it, and nothing of the batch is stored
    r = api.post(token, job_id, {"scores": [{"step": 6, "value": 0.8, "attempt": 1},
                                            {"step": 7, "value": 0.8, "attempt": 2}]})
    assert r.status_code == 409 and "scores[1].attempt 2" in r.json()["detail"], r.text
    assert len(api.client.get(f"/v1/jobs/{job_id}/scores", headers=api.as_(token)).json()) == 3


# -- the service never logs a statement's parameters -------------------------------------------
SECRET = "value-that-must-not-reach-the-log-4711"


def test_a_database_error_is_logged_without_its_parameters(
    api_any_db: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement that fails in the database (here a NOT NULL violation, forced into the
    revoke path) is answered without a traceback, and neither the log nor the reply carries the
    statement's parameters or the database's DETAIL (which repeats the row)."""
    from evalstop.service import tokens
    from evalstop.service.store.tables import tenants

    api = api_any_db
    api.tenant("acme")

    def failing(store: Any, *_args: Any, **_kwargs: Any) -> Any:
        with store.transaction() as conn:
            conn.execute(sa.insert(tenants).values(name=SECRET, token_hash=None, created_at=0.0))

    monkeypatch.setattr(tokens, "revoke", failing)
    caplog.set_level(logging.DEBUG)
    r = api.client.post("/v1/tenants/acme/token/revoke", json={"reason": "x"}, headers=api.as_(ADMIN))
    assert r.status_code == 500 and SECRET not in r.text
    assert "database error: IntegrityError" in caplog.text or "NotNullViolation" in caplog.text
    assert SECRET not in caplog.text and "Traceback" not in caplog.text


def test_the_engine_hides_parameters_from_its_errors(api_any_db: Api) -> None:
    """SQLAlchemy's own message (what a caller that logs an exception prints) has no parameters."""
    from evalstop.service.store.tables import tenants

    store = api_any_db.ctx.store
    with pytest.raises(sa.exc.IntegrityError) as caught, store.transaction() as conn:
        conn.execute(sa.insert(tenants).values(name=SECRET, token_hash=None, created_at=0.0))
    assert "[parameters:" not in str(caught.value) and "parameters hidden" in str(caught.value)
    assert SECRET not in str(caught.value), str(caught.value)


# -- a session cookie, a CSRF field or a bearer token with any characters -----------------------
@pytest.mark.parametrize("cookie", [b"evalstop_session=\xc3\xa9\xc3\xa9.\xc3\xa9",
                                    b"evalstop_session=ab.\xe9", b"evalstop_session=\xff.\xff"])
def test_a_non_ascii_session_cookie_is_a_sign_in_page_not_a_500(api: Api, cookie: bytes) -> None:
    for path in ("/ui/", "/ui/jobs"):
        r = api.client.get(path, headers={b"cookie": cookie}, follow_redirects=False)
        assert r.status_code in (200, 303, 307, 401, 403), (path, r.status_code)
    r = api.client.post("/ui/logout", headers={b"cookie": cookie,
                                               b"content-type": b"application/x-www-form-urlencoded"},
                        content="csrf=%C3%A9", follow_redirects=False)
    assert r.status_code < 500
    r = api.client.get("/v1/jobs", headers={b"authorization": b"Bearer \xc3\xa9\xff"})
    assert r.status_code == 401


def test_a_tenant_default_policy_with_a_huge_max_rewinds_is_422_even_when_it_stops(api_any_db: Api) -> None:
    api = api_any_db
    api.tenant("acme")
    for huge in (int("4" * 4000), 1001):
        policy = {"on_detect": "stop", "max_rewinds": huge}
        r = api.client.put("/v1/tenants/acme/on_detect", json={"on_detect": policy}, headers=api.as_(ADMIN))
        assert r.status_code == 422, r.text[:300]
        assert "'max_rewinds' parameter of OnDetect must be an int >= 0 and <= 1000" in r.json()["detail"]
    r = api.client.get("/v1/tenants/acme/on_detect", headers=api.as_(ADMIN))
    assert r.json()["on_detect"] is None
