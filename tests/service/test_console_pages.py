"""The console's job list paged, filtered and sorted by the database (issue 22, console items 4
and 5), and the job page's next-eval hint (issue 20) and rewind segments (issue 23), read from
the job's stored monitor. In process, on SQLite and PostgreSQL where the database matters."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

import sqlalchemy as sa

from evalstop.detectors import Eval, Monitor
from evalstop.service.store.tables import jobs

from ._support import ADMIN, Api
from .test_console import sign_in


def rows_of(api: Api, **params: Any) -> list[str]:
    html = api.client.get("/ui/jobs", params={"partial": "rows", **params}).text
    return re.findall(r'<tr data-job-id="([0-9a-f]+)"', html)


def fired_at(step: int) -> dict[str, Any]:
    """Scores on which ``evalstop:k=2`` fires at ``step`` (two declines after a peak)."""
    values = [(step - 30, 0.50), (step - 20, 0.61), (step - 10, 0.58), (step, 0.57)]
    return {"scores": [{"step": s, "value": v} for s, v in values]}


def test_the_list_is_paged_by_the_database(api_any_db: Api) -> None:
    api = api_any_db
    a, b = api.tenant("team-a"), api.tenant("team-b")
    made = [api.job(a, name=f"a-{i:03d}")["id"] for i in range(57)] + [api.job(b, name="b-0")["id"]]
    sign_in(api.client, ADMIN, "ops")
    pages = [rows_of(api, per=25, page=n) for n in (1, 2, 3)]
    assert [len(p) for p in pages] == [25, 25, 8]
    assert sorted(i for p in pages for i in p) == sorted(made)  # every job once, newest first
    assert pages[0][0] == made[-1]
    assert rows_of(api, per=25, page=99) == pages[2]  # past the end: the last page
    full = api.client.get("/ui/jobs", params={"per": 25, "page": 2}).text
    assert re.search(r'<strong aria-current="page" data-page="2">2</strong>', full)
    found = re.findall(r'href="/ui/jobs\?([^"]+)" data-page="(\d+)"(?: rel="(\w+)")?', full)
    links = {(n, rel): parse_qs(q.replace("&amp;", "&")) for q, n, rel in found}
    assert links[("1", "")] == {"sort": ["created"], "dir": ["desc"], "per": ["25"]}  # page 1: no page
    assert links[("3", "next")]["page"] == ["3"] and links[("1", "prev")]["per"] == ["25"]
    poll = re.search(r'data-poll="/ui/jobs\?([^"]+)"', full)
    assert poll is not None and parse_qs(poll.group(1).replace("&amp;", "&"))["page"] == ["2"]
    assert "Jobs 26&ndash;50 of 58" in full
    only_b = rows_of(api, tenant="team-b")
    assert only_b == [made[-1]] and 'id="pager"' not in api.client.get("/ui/jobs?tenant=team-b").text
    assert len(rows_of(api)) == 50  # the default page size; no 500-row cap, no "narrow the filters"


def test_decisions_sort_by_kind_then_step_as_numbers(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    by_step = {}
    for step in (750, 700, 2200):
        job = api.job(token, name=f"fired-{step}")
        assert api.post(token, job["id"], fired_at(step)).status_code == 200
        by_step[step] = job["id"]
    quiet = api.job(token, name="quiet")["id"]
    shadowed = api.job(token, name="shadowed", shadow=True)
    api.post(token, shadowed["id"], fired_at(5000))
    manual = api.job(token, name="manual")["id"]
    r = api.client.put(f"/v1/jobs/{manual}/override", json={"override": "stop_now", "reason": "x"},
                       headers=api.as_(token))
    assert r.status_code == 200
    sign_in(api.client, token)
    ascending = [quiet, shadowed["id"], by_step[700], by_step[750], by_step[2200], manual]
    assert rows_of(api, sort="decision", dir="asc") == ascending
    assert rows_of(api, sort="decision", dir="desc") == [manual, by_step[2200], by_step[750], by_step[700],
                                                         shadowed["id"], quiet]
    html = api.client.get("/ui/jobs", params={"partial": "rows", "sort": "decision"}).text
    assert "stop at step 2200" in html and "shadow stop at step 5000" in html
    assert "stop now (override)" in html
    assert rows_of(api, sort="decision", dir="asc", per=10, page=1)[:3] == ascending[:3]
    by_state = rows_of(api, sort="state", dir="asc")  # the shown state sorts in SQL too
    assert set(by_state[:2]) == {quiet, shadowed["id"]}  # running, before the four stopping
    assert rows_of(api, sort="last_step", dir="desc")[0] == shadowed["id"]  # step 5000


def test_the_job_page_shows_the_stored_monitors_next_eval_hint(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, detector="evalstop:k=3")
    api.post(token, job["id"], {"scores": [{"step": 10, "value": 0.5}, {"step": 20, "value": 0.4}]})
    sign_in(api.client, token)
    page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert 'id="next-eval-when" data-after="1" data-step=""' in page
    assert "at the next eval opportunity" in page
    assert 'data-elevated="true"' in page  # the latest eval is below the running best
    monitor = Monitor("evalstop:k=3", "adaptive:every=4,dense=1", 10)
    monitor.observe_many([Eval(10, 0.5), Eval(20, 0.6)])
    store_monitor(api, job["id"], monitor)
    page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert 'data-after="4" data-step="60"' in page and "at step 60" in page  # quiet: every 4th, from 20
    assert 'data-elevated="false"' in page
    falling = [{"step": s, "value": (80 - s) / 100} for s in (30, 40, 50)]
    api.post(token, job["id"], {"scores": falling})  # three declines: the rule fires
    assert 'id="next-eval-done"' in api.client.get(f"/ui/jobs/{job['id']}").text
    with api.ctx.store.transaction() as conn:  # unreadable: rebuilt from the history, the page still shows
        conn.execute(sa.update(jobs).where(jobs.c.id == job["id"]).values(monitor_state={"format": 99}))
    broken = api.client.get(f"/ui/jobs/{job['id']}")
    assert broken.status_code == 200 and 'id="next-eval-none"' in broken.text  # stopping: no eval asked


def store_monitor(api: Api, job_id: str, monitor: Monitor) -> None:
    """Write ``monitor`` as the job's stored monitor, as ingest does (``Monitor.to_json()``)."""
    with api.ctx.store.transaction() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(monitor_state=monitor.to_json()))


def _wide(page: str) -> str:
    """The wide drawing of the job's curve (the narrow one repeats every mark)."""
    return page.split('id="narrow-curve"')[0]


def _row_decision(api: Api, job_id: str) -> str:
    html = api.client.get("/ui/jobs", params={"partial": "rows"}).text
    row = html.split(f'<tr data-job-id="{job_id}"', 1)[1].split("</tr>", 1)[0]
    found = re.search(r'<td class="decision">([^<]*)</td>', row)
    assert found is not None
    return found.group(1)


# k=2 fires at 40 (rewind 1 to step 20); the next attempt reports 30.. again and fires at 60
# (rewind 2 to step 40, its best); the third fires at 70 with no rewind left: the final stop.
ATTEMPTS = [[(10, 0.50), (20, 0.61), (30, 0.58), (40, 0.57)],
            [(30, 0.66), (40, 0.70), (50, 0.64), (60, 0.60)],
            [(50, 0.72), (60, 0.69), (70, 0.68)]]


def test_a_rewound_job_is_drawn_from_its_stored_rewinds(api_any_db: Api) -> None:
    """Each attempt as the service stored it (the evals a rewind discarded are in rewound_scores),
    a marker per rewind from the stored monitor, no stop marker while the job runs, the final stop."""
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, detector="evalstop:k=2", on_detect="rewind", max_rewinds=2, correction="kl_coef*=2")
    url = f"/ui/jobs/{job['id']}"
    sign_in(api.client, token)
    for n, attempt in enumerate(ATTEMPTS):
        for step, value in attempt[:-1] if n == 2 else attempt:
            body = {"step": step, "value": value, "checkpoint_uri": f"s3://ck/{n}/{step}", "attempt": n}
            assert api.post(token, job["id"], body).status_code == 200
    page = api.client.get(url).text
    segments = re.findall(r'<polyline points="([^"]+)"[^>]*id="evals-(\d)"', _wide(page))
    assert [(len(p.split()), n) for p, n in segments] == [(4, "1"), (4, "2"), (2, "3")]
    marks = re.findall(r'class="marker-rewind" data-step="(\d+)" data-to-step="(\d+)" '
                       r'data-correction="([^"]*)" data-checkpoint="([^"]*)"', _wide(page))
    assert marks == [("40", "20", "kl_coef*=2", "s3://ck/0/20"), ("60", "40", "kl_coef*=2", "s3://ck/1/40")]
    assert "rewind 2 to step 40 (kl_coef*=2)" in page and "Rewind 2</strong>" in page
    assert 'id="marker-stop"' not in page and "Stop</strong>" not in page and "stop now" not in page
    assert 'id="no-decision"' in page and 'id="next-eval-when"' in page
    assert _row_decision(api, job["id"]) == "rewound at step 60"
    last = ATTEMPTS[2][-1]
    body = {"step": last[0], "value": last[1], "attempt": 2}
    assert api.post(token, job["id"], body).json()["decision"] == "stop"
    page = api.client.get(url).text
    assert re.search(r'id="marker-stop" data-step="70"', _wide(page)) and "stop (step 70)" in page
    assert len(re.findall(r'class="marker-rewind"', _wide(page))) == 2
    assert page.count("Stop</strong>") == 1 and "by the rule at step 70" in page
    assert _row_decision(api, job["id"]) == "stop at step 70"
    assert 'id="next-eval-done"' in page


def test_a_job_that_is_not_running_asks_for_no_eval(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    api.post(token, job["id"], {"step": 10, "value": 0.5})
    r = api.client.put(f"/v1/jobs/{job['id']}/override", json={"override": "stop_now", "reason": "x"},
                       headers=api.as_(token))
    assert r.status_code == 200
    page = sign_in(api.client, token).get(f"/ui/jobs/{job['id']}").text
    assert "at the next eval opportunity" not in page
    assert re.search(r'id="next-eval-none">none: the job is (stopping|stopped)<', page)


def test_a_shadow_rewind_is_shown_as_recorded_not_made(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, detector="evalstop:k=2", shadow=True, on_detect="rewind", correction="lr*=0.5")
    for step, value in ATTEMPTS[0]:
        assert api.post(token, job["id"], {"step": step, "value": value}).status_code == 200
    page = sign_in(api.client, token).get(f"/ui/jobs/{job['id']}").text
    assert re.search(r'id="marker-stop" data-step="40"', _wide(page)) and "shadow rewind (step 40)" in page
    assert "Shadow rewind (recorded, not enforced)</strong>" in page and 'class="marker-rewind"' not in page
    assert _row_decision(api, job["id"]) == "shadow rewind at step 40"
