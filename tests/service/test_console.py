"""The console's HTTP behaviour in process: sign-in, session cookie, CSRF, tenant scoping, pages.
(The browser tests in tests/console drive the same pages through a real Chromium.)"""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from ._support import ADMIN, Api

DECLINING = [(1, 0.50), (2, 0.61), (3, 0.58), (4, 0.57)]  # k=2 fires at step 4


def sign_in(client: TestClient, token: str, name: str = "") -> TestClient:
    page = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    r = client.post("/ui/login", data={"token": token, "name": name, "csrf": csrf.group(1)},
                    follow_redirects=False)
    assert r.status_code == 303, r.text
    return client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def shadow_of(html: str) -> str:
    """What the job page's "Shadow" fact says."""
    found = re.search(r'id="job-shadow"[^>]*>([^<]*)<', html)
    assert found is not None
    return found.group(1).strip()


def test_pages_need_a_session_and_the_cookie_is_strict(api: Api) -> None:
    c = api.client
    assert c.get("/ui/jobs", follow_redirects=False).headers["location"] == "/ui/login"
    page = c.get("/ui/login")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    bad = c.post("/ui/login", data={"token": ADMIN, "csrf": "forged"}, follow_redirects=False)
    assert bad.status_code == 403
    wrong = c.post("/ui/login", data={"token": "nope", "csrf": csrf_of(page.text)}, follow_redirects=False)
    assert wrong.status_code == 401 and "Unknown token" in wrong.text
    ok = c.post("/ui/login", data={"token": ADMIN, "csrf": csrf_of(page.text)}, follow_redirects=False)
    cookie = ok.headers["set-cookie"]
    assert "evalstop_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert c.get("/ui/jobs").status_code == 200
    tampered = c.cookies["evalstop_session"][:-3] + "AAA"
    c.cookies.clear()
    c.cookies.set("evalstop_session", tampered)
    assert c.get("/ui/jobs", follow_redirects=False).status_code == 303  # tampered: signed out


def test_a_tenant_sees_only_its_jobs_and_another_tenants_job_is_not_found(api: Api) -> None:
    a, b = api.tenant("team-a"), api.tenant("team-b")
    ja, jb = api.job(a, name="alpha-run"), api.job(b, name="beta-run")
    c = sign_in(api.client, a)
    listing = c.get("/ui/jobs").text
    assert "alpha-run" in listing and "beta-run" not in listing
    rows = c.get("/ui/jobs", params={"partial": "rows"}).text
    assert ja["id"] in rows and jb["id"] not in rows
    assert c.get(f"/ui/jobs/{jb['id']}").status_code == 404
    assert "not found" in c.get(f"/ui/jobs/{jb['id']}").text
    csrf = csrf_of(c.get(f"/ui/jobs/{ja['id']}").text)
    r = c.post(f"/ui/jobs/{jb['id']}/override", data={"action": "stop_now", "csrf": csrf})
    assert r.status_code == 404
    assert api.client.get(f"/v1/jobs/{jb['id']}", headers=api.as_(b)).json()["state"] == "running"


def test_stop_now_from_the_console_needs_csrf_and_is_audited(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, name="run-1")
    c = sign_in(api.client, token, name="alice")
    url = f"/ui/jobs/{job['id']}"
    forged = c.post(f"{url}/override", data={"action": "stop_now", "csrf": "x"})
    assert forged.status_code == 403
    cross = c.post(f"{url}/override", data={"action": "stop_now", "csrf": csrf_of(c.get(url).text)},
                   headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()["state"] == "running"
    form = {"action": "stop_now", "reason": "hacking", "csrf": csrf_of(c.get(url).text)}
    r = c.post(f"{url}/override", data=form)
    assert r.status_code == 200 and 'id="job-state">stopping' in r.text
    trail = api.client.get(f"/v1/jobs/{job['id']}/audit", headers=api.as_(token)).json()
    assert [(t["actor"], t["principal"], t["action"], t["reason"], t["channel"]) for t in trail] == [
        ("alice", "tenant:acme", "stop_now", "hacking", "console")]
    decisions = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(token)).json()
    assert decisions[0]["reason"] == "stop_now override by alice (tenant:acme): hacking"


def test_job_page_markers_match_the_decision(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    api.post(token, job["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    page = sign_in(api.client, token).get(f"/ui/jobs/{job['id']}").text
    assert re.search(r'id="marker-best" data-step="2"', page)
    assert re.search(r'id="marker-stop" data-step="4"', page)
    wide = page.split('id="narrow-curve"')[0]  # the narrow drawing repeats every mark
    assert sorted(map(int, re.findall(r'class="counted" data-step="(\d+)"', wide))) == [3, 4]
    assert 'id="band"' in page  # the decline threshold of the k-declines rule


def test_filters_and_sorting(api: Api) -> None:
    token = api.tenant("acme")
    for name in ("b-job", "a-job", "c-job"):
        api.job(token, name=name)
    stopped = api.job(token, name="d-job")
    api.post(token, stopped["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    c = sign_in(api.client, ADMIN)
    rows = c.get("/ui/jobs", params={"partial": "rows", "sort": "name", "dir": "asc"}).text
    assert re.findall(r">([a-d]-job)<", rows) == ["a-job", "b-job", "c-job", "d-job"]
    only = c.get("/ui/jobs", params={"partial": "rows", "state": "stopping"}).text
    assert re.findall(r">([a-d]-job)<", only) == ["d-job"]
    assert "stop at step 4" in only
    found = c.get("/ui/jobs", params={"partial": "rows", "q": "c-j"}).text
    assert re.findall(r">([a-d]-job)<", found) == ["c-job"]
    assert "No jobs match" in c.get("/ui/jobs", params={"partial": "rows", "q": "%"}).text  # literal %
    by_decision = c.get("/ui/jobs", params={"partial": "rows", "sort": "decision", "dir": "desc"}).text
    assert re.findall(r">([a-d]-job)<", by_decision)[0] == "d-job"
    api.job(token, name="e-job", detector="patience")
    rule = c.get("/ui/jobs", params={"partial": "rows", "rule": "patience"}).text
    assert re.findall(r">([a-e]-job)<", rule) == ["e-job"]
    unknown = c.get("/ui/jobs", params={"partial": "rows", "sort": "nope; drop", "state": "bogus"}).text
    assert len(re.findall(r">([a-e]-job)<", unknown)) == 5  # unknown sort/state: the defaults


def test_savings_page_shows_the_reports_numbers(api: Api) -> None:
    token = api.tenant("acme", shadow=True)
    job = api.job(token, gpus=4, expected_duration_s=36_000)
    rewound = api.job(token, name="r-job", on_detect="rewind", correction="kl_coef*=2")
    for j in (job, rewound):
        api.post(token, j["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    report = api.client.get("/v1/reports/shadow", headers=api.as_(ADMIN)).json()
    page = sign_in(api.client, ADMIN).get("/ui/savings").text
    shown = re.search(r'class="n-jobs">(\d+)</strong>.*?class="gpu-hours">([\d.]+)<', page, re.S)
    assert shown is not None
    want = (report[0]["would_stop_jobs"], f"{report[0]['gpu_hours']:.2f}")
    assert (int(shown.group(1)), shown.group(2)) == want == (1, "40.00")
    rewinds = re.search(r'class="n-rewinds">(\d+)</strong>.*?data-job-id="([^"]+)">r-job<', page, re.S)
    assert rewinds is not None and rewinds.groups() == ("1", rewound["id"])


def _failed_stop_signed_in(api: Api) -> tuple[dict[str, Any], Any]:
    """A tenant's job whose stop failed for good (a permanent signal error), and a console
    client signed in as that tenant."""
    token = api.tenant("acme")
    job = api.job(token, grace_period_s=0)
    api.adapter().fail_next("signal", 1, retryable=False)
    api.post(token, job["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    api.ctx.worker.run_once()
    return job, sign_in(api.client, token, "bob")


def test_retry_button_for_a_failed_stop(api: Api) -> None:
    job, c = _failed_stop_signed_in(api)
    url = f"/ui/jobs/{job['id']}"
    page = c.get(url).text
    assert 'id="retry-stop"' in page and "in signal: AdapterError" in page
    r = c.post(f"{url}/retry", data={"reason": "fixed the adapter", "csrf": csrf_of(page)})
    assert r.status_code == 200 and 'id="job-state">stopping' in r.text
    api.ctx.worker.run_once()
    page = c.get(url).text
    assert 'id="job-state">stopped' in page and "retry_stop" in page and "fixed the adapter" in page
    again = c.post(f"{url}/retry", data={"csrf": csrf_of(page)})
    assert again.status_code == 409 and "only a failed stop" in again.text


def test_sign_out_and_expiry(api: Api) -> None:
    c = sign_in(api.client, ADMIN)
    page = c.get("/ui/jobs").text
    assert c.post("/ui/logout", data={"csrf": "wrong"}).status_code == 403
    c.post("/ui/logout", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert c.get("/ui/jobs", follow_redirects=False).status_code == 303
    c = sign_in(api.client, ADMIN)
    auth = api.client.app.state.console_auth  # type: ignore[attr-defined]
    auth.clock = lambda: api.ctx.store.clock() + 9 * 3600  # past the 8 h session
    assert c.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_console_pages_on_both_databases(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme", shadow=True)
    live = api.tenant("live")
    shadowed = api.job(token, name="s-job", gpus=2, expected_duration_s=7200)
    stopped = api.job(live, name="l-job", grace_period_s=0)
    for who, job in ((token, shadowed), (live, stopped)):
        api.post(who, job["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    api.ctx.worker.run_once()
    c = sign_in(api.client, ADMIN)
    rows = c.get("/ui/jobs", params={"partial": "rows", "shadow": "yes"}).text
    assert re.findall(r">([sl]-job)<", rows) == ["s-job"] and "shadow stop at step 4" in rows
    by_step = c.get("/ui/jobs", params={"partial": "rows", "sort": "last_step", "dir": "asc"}).text
    assert sorted(re.findall(r">([sl]-job)<", by_step)) == ["l-job", "s-job"]
    page = c.get(f"/ui/jobs/{stopped['id']}").text
    assert 'id="marker-stop" data-step="4"' in page and ">done<" in page
    savings = c.get("/ui/savings").text
    assert 'data-tenant="acme"' in savings and 'data-tenant="live"' in savings


def test_release_button_for_a_failed_stop(api: Api) -> None:
    job, c = _failed_stop_signed_in(api)
    url = f"/ui/jobs/{job['id']}"
    page = c.get(url).text
    assert re.search(r'id="release-form"[^>]*data-when="stop_failed">', page)  # shown
    assert c.post(f"{url}/release", data={"reason": "x"}).status_code == 403  # no CSRF token
    r = c.post(f"{url}/release", data={"reason": "killed it by hand", "csrf": csrf_of(page)})
    assert r.status_code == 200 and 'id="job-state">released' in r.text  # not "stopped" (console item 1)
    assert re.search(r'id="release-form"[^>]*data-when="stop_failed" hidden>', r.text)  # hidden now
    assert 'id="released-reason">killed it by hand<' in r.text


def test_shadow_toggle_in_the_console_is_audited(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, grace_period_s=0)
    c = sign_in(api.client, token, "bob")
    url = f"/ui/jobs/{job['id']}"
    page = c.get(url).text
    assert 'id="shadow-toggle"' in page and shadow_of(page).startswith("no")
    r = c.post(f"{url}/shadow", data={"enabled": "true", "reason": "trial week", "csrf": csrf_of(page)})
    assert r.status_code == 200 and shadow_of(r.text) == "yes (this job)"
    # the rule fires: recorded, not enforced
    api.post(token, job["id"], {"scores": [{"step": s, "value": v} for s, v in DECLINING]})
    api.ctx.worker.run_once()
    assert api.adapter().effects("signal", job["external_ref"]) == 0
    r = c.post(f"{url}/shadow", data={"enabled": "false", "csrf": csrf_of(r.text)})
    assert r.status_code == 200 and shadow_of(r.text).startswith("no")
    trail = api.client.get(f"/v1/jobs/{job['id']}/audit", headers=api.as_(token)).json()
    assert [(a["action"], a["reason"], a["channel"]) for a in trail] == [
        ("shadow_on", "trial week", "console"), ("shadow_off", "", "console")]


# -- issue 22: the console's rough edges -------------------------------------------------------------
def test_a_job_of_a_tenant_in_shadow_mode_says_so_on_its_page(api: Api) -> None:
    """The list said "shadow" while the job page said "Shadow: no" (issue 22, console item 2)."""
    token = api.tenant("acme", shadow=True)
    job = api.job(token)
    page = sign_in(api.client, token).get(f"/ui/jobs/{job['id']}").text
    assert shadow_of(page).startswith("yes: tenant acme is in shadow mode")
    assert 'id="tenant-shadow-note"' in page
    live = api.client.get(f"/ui/jobs/{job['id']}", params={"partial": "live"}).text
    assert "tenant acme is in shadow mode" in live


def test_stop_now_from_the_console_needs_a_reason(api: Api) -> None:
    """One click stopped a job, with an optional reason (issue 22, console item 10)."""
    token = api.tenant("acme")
    job = api.job(token)
    c = sign_in(api.client, token, "bob")
    url = f"/ui/jobs/{job['id']}"
    page = c.get(url).text
    assert 'data-confirm="Stop ' in page and page.count("<label>Why") == 5  # each box says what it is for
    for reason in ("", "   "):
        r = c.post(f"{url}/override", data={"action": "stop_now", "reason": reason, "csrf": csrf_of(page)})
        assert r.status_code == 422 and "say why" in r.text
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()["override"] is None


def test_live_updates_without_a_session_say_signed_out(api: Api) -> None:
    """A signed-out tab's poll followed the redirect to the sign-in page and read it as a 200
    ("Live updates paused: status 200"; issue 22, console item 9)."""
    token = api.tenant("acme")
    job = api.job(token)
    for params in ({"partial": "rows"}, {"partial": "live"}):
        path = "/ui/jobs" if params["partial"] == "rows" else f"/ui/jobs/{job['id']}"
        r = api.client.get(path, params=params, follow_redirects=False)
        assert r.status_code == 401 and r.text == "signed out"
    assert api.client.get("/ui/jobs", follow_redirects=False).status_code == 303  # a page still redirects


def test_the_live_job_page_redraws_only_when_something_changed(api: Api) -> None:
    """The live poll answers 204 while nothing the page shows changed (a quiet job costs a few
    small queries, not a re-read of its whole history every 3 s)."""
    token = api.tenant("acme")
    job = api.job(token)
    c = sign_in(api.client, token)
    url = f"/ui/jobs/{job['id']}"
    first = c.get(url, params={"partial": "live"})
    found = re.search(r'data-token="([0-9a-f]{32})"', first.text)
    assert first.status_code == 200 and found is not None
    assert c.get(url, params={"partial": "live", "since": found.group(1)}).status_code == 204
    api.post(token, job["id"], {"step": 1, "value": 0.5})
    changed = c.get(url, params={"partial": "live", "since": found.group(1)})
    assert changed.status_code == 200 and "1, last step 1" in changed.text
    other = api.job(api.tenant("other"))
    assert c.get(f"/ui/jobs/{other['id']}", params={"partial": "live"}).status_code == 404


def test_a_tenants_sign_out_is_audited_with_its_token_events(api_any_db: Api, caplog: Any) -> None:
    """A tenant's sign-out leaves a ``sign_out`` row in its token audit (once: a copy of the
    cookie finds the session ended); an operator's, with no tenant to file it under, is logged."""
    api = api_any_db
    token = api.tenant("acme")
    c = sign_in(api.client, token, "alice")
    cookie = c.cookies.get("evalstop_session")
    c.post("/ui/logout", data={"csrf": csrf_of(c.get("/ui/jobs").text)}, follow_redirects=False)
    c.cookies.set("evalstop_session", cookie or "", path="/ui")
    assert c.post("/ui/logout", data={"csrf": "any"}, follow_redirects=False).status_code == 303
    trail = api.client.get("/v1/tenants/acme/token/audit", headers=api.as_(ADMIN)).json()
    assert [(t["action"], t["principal"], t["actor"], t["channel"]) for t in trail] == [
        ("sign_out", "tenant:acme", "alice", "console")]
    with caplog.at_level("INFO", logger="evalstop.service.console"):
        c = sign_in(api.client, ADMIN, "root")
        c.post("/ui/logout", data={"csrf": csrf_of(c.get("/ui/jobs").text)}, follow_redirects=False)
    assert "console sign-out: root (operator)" in caplog.text
    assert len(api.client.get("/v1/tenants/acme/token/audit", headers=api.as_(ADMIN)).json()) == 1
