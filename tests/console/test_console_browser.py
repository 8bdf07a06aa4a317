"""The console in a real headless Chromium against a real ``evalstop serve`` on loopback."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from evalstop.detectors import Eval, Monitor, OnDetect
from evalstop.service.store.tables import jobs

from ._support import ADMIN, screenshot, wait_for

httpx = pytest.importorskip("httpx")


def hacked_curve(n: int = 36, peak: int = 22) -> list[dict[str, Any]]:
    """Rises to a peak, then the eval score falls (a reward-hacked run); a small fixed wobble."""
    out = []
    for i in range(1, n + 1):
        rise = 0.32 + 0.4 * (1 - math.exp(-i / 7))
        fall = 0.012 * max(0, i - peak) ** 1.3
        out.append({"step": 100 * i, "value": round(rise - fall + 0.006 * math.sin(1.7 * i), 4),
                    "checkpoint_uri": f"s3://ckpt/run/{100 * i}"})
    return out


def rising_curve(n: int = 15) -> list[dict[str, Any]]:
    return [{"step": 50 * i, "value": round(0.2 + 0.03 * i + 0.004 * math.cos(i), 4)}
            for i in range(1, n + 1)]


class World:
    """Tenants and jobs made through the JSON API before the browser comes in."""

    def __init__(self, base: str, down: Path) -> None:
        self.base, self.down = base, down
        self.http = httpx.Client(base_url=base, timeout=10)
        self.admin = {"Authorization": f"Bearer {ADMIN}"}
        self.a = self._tenant("team-a")
        self.b = self._tenant("team-b")
        self.c = self._tenant("team-c", shadow=True)
        k3 = "evalstop:k=3,against=best"
        self.stopped = self._job(self.a, "a-llama-rlhf-hacked", detector=k3, gpus=8,
                                 expected_duration_s=86_400)
        self.running = self._job(self.a, "a-mistral-dpo", gpus=4)
        self.shadowed = self._job(self.a, "a-qwen-grpo-shadow", detector=k3, gpus=2, shadow=True,
                                  expected_duration_s=36_000)
        self.secret = self._job(self.b, "b-secret-run", gpus=16)
        self.c_job = self._job(self.c, "c-ppo-shadow-tenant", detector=k3, gpus=8)
        self._post(self.a, self.stopped, hacked_curve())
        self._post(self.a, self.running, rising_curve())
        self._post(self.a, self.shadowed, hacked_curve(30, 14))
        self._post(self.b, self.secret, rising_curve(8))
        self._post(self.c, self.c_job, hacked_curve(28, 12))
        wait_for(lambda: self.get(self.a, f"/v1/jobs/{self.stopped}")["state"] == "stopped", 20,
                 "the dry-run stop to be delivered")

    def _tenant(self, name: str, **body: Any) -> dict[str, str]:
        r = self.http.post("/v1/tenants", json={"name": name, **body}, headers=self.admin)
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}", "token": r.json()["token"]}

    def _job(self, who: dict[str, str], name: str, **body: Any) -> str:
        payload = {"external_ref": f"raysubmit_{name}", "target": "dry-run", "name": name,
                   "grace_period_s": 0, **body}
        r = self.http.post("/v1/jobs", json=payload, headers=self.auth(who))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def _post(self, who: dict[str, str], job_id: str, scores: list[dict[str, Any]]) -> None:
        r = self.http.post(f"/v1/jobs/{job_id}/scores", json={"scores": scores}, headers=self.auth(who))
        assert r.status_code == 200, r.text

    @staticmethod
    def auth(who: dict[str, str]) -> dict[str, str]:
        return {"Authorization": who["Authorization"]}

    def get(self, who: dict[str, str], path: str) -> Any:
        r = self.http.get(path, headers=self.auth(who))
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture(scope="module")
def world(server: tuple[str, Path]) -> World:
    return World(*server)


@pytest.fixture
def page(browser: Any, world: World) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def sign_in(page: Any, world: World, token: str, name: str = "") -> None:
    page.goto(world.base + "/ui/jobs")
    assert page.url.endswith("/ui/login")
    page.fill("input[name=token]", token)
    page.fill("input[name=name]", name)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/jobs")


def listed_ids(page: Any) -> set[str]:
    ids = page.eval_on_selector_all("#job-rows tr[data-job-id]", "rows => rows.map(r => r.dataset.jobId)")
    return set(ids)


def test_a_tenant_sees_only_its_jobs_and_another_tenants_job_is_not_found(page: Any, world: World) -> None:
    sign_in(page, world, world.a["token"], "alice")
    api_ids = {j["id"] for j in world.get(world.a, "/v1/jobs")}
    assert listed_ids(page) == api_ids >= {world.stopped, world.running, world.shadowed}
    assert world.secret not in api_ids and world.c_job not in api_ids
    assert "b-secret-run" not in page.content()
    response = page.goto(f"{world.base}/ui/jobs/{world.secret}")
    assert response.status == 404
    assert "not found" in page.inner_text("#error-title")
    assert world.http.get(f"/v1/jobs/{world.secret}", headers=world.auth(world.a)).status_code == 404


def test_a_stopped_jobs_curve_has_both_markers_at_the_decisions_steps(page: Any, world: World) -> None:
    sign_in(page, world, world.a["token"])
    page.click(f"#job-rows tr[data-job-id='{world.stopped}'] a")
    page.wait_for_selector("#curve")
    decision = world.get(world.a, f"/v1/jobs/{world.stopped}/decisions")[0]
    assert decision["source"] == "detector" and not decision["shadow"]
    assert page.get_attribute("#marker-best", "data-step") == str(decision["best_step"])
    assert page.get_attribute("#marker-stop", "data-step") == str(decision["step"])
    counted = page.eval_on_selector_all("circle.counted", "cs => cs.map(c => Number(c.dataset.step))")
    assert len(counted) == 3 and max(counted) == decision["step"]  # k=3 declines, the last one at the stop
    assert page.inner_text("#job-state") == "stopped"
    phases = page.eval_on_selector_all("#delivery-history tbody td:nth-child(2)",
                                       "cs => cs.map(c => c.innerText)")
    assert phases[:3] == ["queued", "pin", "signal"] and phases[-1] == "done"  # the pin row (item 11)
    shot = screenshot(page, "job.png")
    assert shot.stat().st_size > 10_000


def test_stop_now_stops_a_running_job_and_the_audit_trail_shows_it(page: Any, world: World) -> None:
    sign_in(page, world, world.a["token"], "alice")
    page.goto(f"{world.base}/ui/jobs/{world.running}")
    assert page.inner_text("#job-state") == "running"
    page.once("dialog", lambda d: d.dismiss())  # "Stop now" asks first: cancelled, nothing happens
    page.fill("#stop-form input[name=reason]", "reward hacking seen in samples")
    page.click("#stop-now")
    assert world.get(world.a, f"/v1/jobs/{world.running}")["override"] is None
    page.once("dialog", lambda d: d.accept())
    page.click("#stop-now")
    page.wait_for_url(f"**/ui/jobs/{world.running}")
    wait_for(lambda: world.get(world.a, f"/v1/jobs/{world.running}")["state"] == "stopped", 20,
             "the stop to be delivered by the dry-run adapter")
    page.reload()
    assert page.inner_text("#job-state") == "stopped"
    audit = page.inner_text("#audit")
    assert "alice" in audit and "stop_now" in audit and "reward hacking seen in samples" in audit
    assert "console" in audit
    trail = world.get(world.a, f"/v1/jobs/{world.running}/audit")
    assert [(t["actor"], t["action"], t["channel"]) for t in trail] == [("alice", "stop_now", "console")]
    decisions = world.get(world.a, f"/v1/jobs/{world.running}/decisions")
    assert [(d["source"], d["enforced"]) for d in decisions] == [("override", True)]
    assert page.get_attribute("#marker-stop", "data-step") == str(decisions[0]["step"])


def test_the_shadow_summary_matches_the_api(page: Any, world: World) -> None:
    sign_in(page, world, ADMIN, "ops")
    page.goto(world.base + "/ui/savings")
    for tenant in world.get(world.admin, "/v1/reports/shadow"):
        section = page.locator(f".shadow-tenant[data-tenant='{tenant['tenant']}']")
        assert int(section.locator("strong.n-jobs").inner_text()) == tenant["would_stop_jobs"]
        assert section.locator("strong.gpu-hours").inner_text() == f"{tenant['gpu_hours']:.2f}"
        listed = section.locator("tr[data-job-id]").evaluate_all("rs => rs.map(r => r.dataset.jobId)")
        assert listed == [j["job_id"] for j in tenant["jobs"]]
    got = {t["tenant"]: t for t in world.get(world.admin, "/v1/reports/shadow")}
    assert [got[t]["would_stop_jobs"] for t in ("team-a", "team-b", "team-c")] == [1, 0, 1]
    for tenant in world.get(world.admin, "/v1/reports/reclaimed"):
        row = page.locator(f"#reclaimed tr[data-tenant='{tenant['tenant']}']")
        assert row.locator(".gpu-hours").inner_text() == f"{tenant['gpu_hours']:.2f}"
    screenshot(page, "savings.png")


def test_the_jobs_list_updates_live_and_filters(page: Any, world: World) -> None:
    sign_in(page, world, ADMIN, "ops")
    assert listed_ids(page) >= {world.stopped, world.running, world.secret, world.c_job}
    row = f"#job-rows tr[data-job-id='{world.secret}']"
    before = page.inner_text(row)
    world.http.post(f"/v1/jobs/{world.secret}/scores", json={"step": 10_000, "value": 0.5},
                    headers=world.auth(world.b))
    wait_for(lambda: "step 10000" in page.inner_text(row), 10, "the polled rows to show the new eval")
    assert "step 10000" not in before
    screenshot(page, "jobs.png")
    page.select_option("select[name=state]", "stopped")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**state=stopped**")
    states = page.eval_on_selector_all("#job-rows tr[data-job-id] .state", "s => s.map(x => x.innerText)")
    assert states and set(states) == {"stopped"}


def test_a_failed_stop_shows_its_error_and_the_retry_button_delivers_it(page: Any, world: World) -> None:
    job = world._job(world.a, "a-gemma-failing-target", detector="evalstop:k=3,against=best",
                     target="receiver-down")
    world._post(world.a, job, hacked_curve(30, 15))
    wait_for(lambda: world.get(world.a, f"/v1/jobs/{job}")["state"] == "stop_failed", 20, "the stop to fail")
    sign_in(page, world, world.a["token"], "alice")
    page.goto(f"{world.base}/ui/jobs/{job}")
    assert page.inner_text("#job-state") == "stop_failed"
    history = page.inner_text("#delivery-history")
    assert "receiver unreachable" in history and "failed" in history
    screenshot(page, "job-failed.png")
    world.down.unlink()  # the receiver is back
    page.fill("#retry-form input[name=reason]", "receiver restarted")
    page.click("#retry-stop")
    wait_for(lambda: world.get(world.a, f"/v1/jobs/{job}")["state"] == "stopped", 20, "the retried stop")
    page.reload()
    assert page.inner_text("#job-state") == "stopped"
    assert [h["phase"] for h in world.get(world.a, f"/v1/jobs/{job}/delivery-history")] == [
        "queued", "pin", "failed", "retry", "pin", "signal", "reconcile", "done"]
    audit = page.inner_text("#audit")
    assert "retry_stop" in audit and "receiver restarted" in audit and "alice" in audit


# -- issue 22: the console's rough edges ---------------------------------------------------------------
def test_the_keyboard_focus_stays_put_while_the_list_updates(page: Any, world: World) -> None:
    """The 3 s refresh replaced the table and took the focus away (issue 22, console item 3)."""
    sign_in(page, world, ADMIN, "ops")
    link = f"#job-rows tr[data-job-id='{world.secret}'] a"
    page.focus(link)
    step = 20_000 + len(world.get(world.b, f"/v1/jobs/{world.secret}/scores"))
    r = world.http.post(f"/v1/jobs/{world.secret}/scores", json={"step": step, "value": 0.5},
                        headers=world.auth(world.b))
    assert r.status_code == 200, r.text
    row = f"#job-rows tr[data-job-id='{world.secret}']"
    wait_for(lambda: f"step {step}" in page.inner_text(row), 10, "the polled rows to show the new eval")
    focused = page.evaluate("() => { const a = document.activeElement, tr = a.closest('tr'); "
                            "return [a.tagName, tr && tr.dataset.jobId]; }")
    assert focused == ["A", world.secret]
    page.keyboard.press("Enter")  # and the focused link still works
    page.wait_for_url(f"**/ui/jobs/{world.secret}")


def test_the_job_page_follows_a_stop_without_a_reload(page: Any, world: World) -> None:
    """After "Stop now" the page said "stopping" until reloaded (issue 22, console item 6)."""
    job = world._job(world.a, "a-phi-live-page", gpus=2)
    world._post(world.a, job, rising_curve(6))
    sign_in(page, world, world.a["token"], "alice")
    page.goto(f"{world.base}/ui/jobs/{job}")
    assert page.inner_text("#job-state") == "running" and page.is_enabled("#stop-now")
    page.evaluate("() => { window.notReloaded = true; }")
    r = world.http.put(f"/v1/jobs/{job}/override", json={"override": "stop_now", "reason": "from the API"},
                       headers=world.auth(world.a))
    assert r.status_code == 200, r.text
    wait_for(lambda: page.inner_text("#job-state") == "stopped", 20, "the page to show the delivered stop")
    assert page.evaluate("() => window.notReloaded === true")  # updated in place, not reloaded
    assert not page.is_enabled("#stop-now") and not page.is_enabled("#never-stop")
    assert "done" in page.inner_text("#delivery-history") and "from the API" in page.inner_text("#audit")
    assert page.get_attribute("#marker-stop", "data-step") == "300"  # the last eval of rising_curve(6)


def test_a_tab_left_open_after_sign_out_says_so(browser: Any, world: World) -> None:
    """"Live updates paused: status 200" after signing out in another tab (console item 9)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        first = context.new_page()
        sign_in(first, world, world.a["token"])
        second = context.new_page()
        second.goto(world.base + "/ui/jobs")
        first.click("header .who button[type=submit]")
        first.wait_for_url("**/ui/login")
        wait_for(lambda: "signed out" in second.inner_text("#updated"), 15, "the open tab to notice")
        assert second.get_attribute("#updated a", "href") == "/ui/login"
    finally:
        context.close()


def test_columns_sort_ascending_first(page: Any, world: World) -> None:
    """The first click on any column sorted descending (issue 22, console item 4)."""
    sign_in(page, world, ADMIN)
    page.click("th a:has-text('Last eval')")
    page.wait_for_url("**sort=last_step**")
    assert "dir=asc" in page.url
    steps = page.eval_on_selector_all("#job-rows tr[data-job-id] td:nth-child(6)",
                                      "cs => cs.map(c => c.innerText)")
    numbers = [int(t.split()[1].rstrip(":")) for t in steps if t]
    assert numbers == sorted(numbers) and len(numbers) >= 3


def _overflow(page: Any) -> int:
    return int(page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth"))


def test_pages_fit_a_390_px_screen(browser: Any, world: World) -> None:
    """At 390 px the pages overflowed: the chart was a fixed 760 px (issue 22, console item 8)."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        sign_in(page, world, ADMIN, "ops")
        for path in ("/ui/jobs", f"/ui/jobs/{world.stopped}", "/ui/savings"):
            page.goto(world.base + path)
            assert _overflow(page) <= 0, path
        page.goto(f"{world.base}/ui/jobs/{world.stopped}")
        assert page.evaluate("() => document.getElementById('curve').getBoundingClientRect().width") <= 390
        screenshot(page, "job-390.png")
    finally:
        context.close()


def test_chart_labels_stay_inside_and_off_the_lines(browser: Any, world: World) -> None:
    """Labels were clipped at the right edge and sat on the lines of the reclaimed chart (item 7)."""
    job = world._job(world.a, "a-yi-stopped-at-its-last-eval", gpus=1)  # both markers at the right edge
    world._post(world.a, job, rising_curve(12))
    r = world.http.put(f"/v1/jobs/{job}/override", json={"override": "stop_now"}, headers=world.auth(world.a))
    assert r.status_code == 200, r.text
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        sign_in(page, world, ADMIN, "ops")
        for path, chart in ((f"/ui/jobs/{world.stopped}", "curve"), (f"/ui/jobs/{job}", "curve"),
                            ("/ui/savings", "reclaimed-chart")):
            page.goto(world.base + path)
            outside = page.evaluate("""id => { const svg = document.getElementById(id);
                const vb = svg.viewBox.baseVal;
                return [...svg.querySelectorAll('text')].filter(t => { const b = t.getBBox();
                  return b.x < 0 || b.y < 0 || b.x + b.width > vb.width || b.y + b.height > vb.height; })
                  .map(t => t.textContent); }""", chart)
            assert outside == [], (path, outside)
        legend = page.eval_on_selector_all("#reclaimed-chart .legend-entry",
                                           "ts => ts.map(t => t.getBBox().y + t.getBBox().height)")
        plot_top = page.eval_on_selector_all("#reclaimed-chart polyline",
                                             "ps => Math.min(...ps.flatMap(p => [...p.points].map(q => q.y)))"
                                             )
        assert legend and max(legend) <= plot_top  # the legend sits above every line
    finally:
        page.close()


def test_a_released_job_shows_as_released_and_adds_nothing_to_reclaimed(page: Any, world: World) -> None:
    """A job released by hand after its stop failed added its GPU-hours to "reclaimed" and showed
    as "stopped" (issue 22, console item 1)."""
    world.down.touch()  # the receiver is down (again)
    job = world._job(world.a, "a-falcon-released-by-hand", detector="evalstop:k=3,against=best",
                     target="receiver-down", gpus=8, expected_duration_s=86_400)
    world._post(world.a, job, hacked_curve(30, 15))
    wait_for(lambda: world.get(world.a, f"/v1/jobs/{job}")["state"] == "stop_failed", 20, "the stop to fail")
    before = {t["tenant"]: t for t in world.get(world.admin, "/v1/reports/reclaimed")}["team-a"]
    sign_in(page, world, world.a["token"], "alice")
    page.goto(f"{world.base}/ui/jobs/{job}")
    page.fill("#release-form input[name=reason]", "killed with ray job stop by hand")
    page.click("#release")
    page.wait_for_url(f"**/ui/jobs/{job}")
    assert page.inner_text("#job-state") == "released"
    assert "killed with ray job stop by hand" in page.inner_text("#released-note")
    assert world.get(world.a, f"/v1/jobs/{job}")["state"] == "stopped"  # the API's state is unchanged
    page.goto(world.base + "/ui/jobs?state=released")
    assert listed_ids(page) == {job}
    assert page.inner_text(f"#job-rows tr[data-job-id='{job}'] .state") == "released"
    after = {t["tenant"]: t for t in world.get(world.admin, "/v1/reports/reclaimed")}["team-a"]
    assert after["gpu_hours"] == before["gpu_hours"] and after["stopped_jobs"] == before["stopped_jobs"]
    assert after["released_jobs"] == before["released_jobs"] + 1
    assert job not in [j["job_id"] for j in after["jobs"]]
    page.goto(world.base + "/ui/savings")
    row = page.locator("#reclaimed tr[data-tenant='team-a']")
    assert row.locator(".gpu-hours").inner_text() == f"{after['gpu_hours']:.2f}"
    assert row.locator(".n-released").inner_text() == str(after["released_jobs"])


def test_a_rewound_job_is_drawn_in_segments_with_its_rewinds(page: Any, world: World) -> None:
    """Issue 23: a job whose monitor rewound is drawn as one segment per attempt, each rewind
    marked with its checkpoint step and correction; the monitor is stored as ingest stores it."""
    job = world._job(world.a, "a-olmo-grpo-rewound", detector="evalstop:k=3,against=best", gpus=4)
    r = world.http.put(f"/v1/jobs/{job}/override", json={"override": "never_stop", "reason": "rewinds"},
                       headers=world.auth(world.a))
    assert r.status_code == 200, r.text
    monitor = Monitor("evalstop:k=3,against=best",
                      policy=OnDetect(on_detect="rewind", max_rewinds=1, correction="kl_coef*=2"))
    curve: list[dict[str, Any]] = []
    for e in hacked_curve(30, 14):  # the first attempt, up to the detection
        curve.append(e)
        monitor.observe(Eval(e["step"], e["value"]), e["checkpoint_uri"])
        if monitor.action == "rewind":
            break
    best, step = monitor.rewind().best_score, curve[-1]["step"]
    assert best is not None
    for i in range(1, 15):  # after the rewind: a little higher, then it falls again (k=3 fires)
        at, value = step + 100 * i, round(best + 0.004 * min(i, 6) - 0.03 * max(0, i - 6), 4)
        curve.append({"step": at, "value": value, "checkpoint_uri": f"s3://ckpt/run/{at}"})
        monitor.observe(Eval(at, value), curve[-1]["checkpoint_uri"])
    assert [e["event"] for e in monitor.log] == ["detect", "rewind", "detect", "stop"]
    world._post(world.a, job, curve)
    engine = sa.create_engine(f"sqlite:///{world.down.parent / 'evalstop.db'}")
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job).values(monitor_state=monitor.to_json()))
    engine.dispose()
    sign_in(page, world, world.a["token"], "alice")
    page.goto(f"{world.base}/ui/jobs/{job}")
    attempts = page.eval_on_selector_all("#curve polyline.attempt", "ps => ps.map(p => p.dataset.attempt)")
    assert attempts == ["1", "2"]
    rewind = monitor.log[1]
    mark = page.locator("#curve g.marker-rewind")
    assert mark.get_attribute("data-step") == str(rewind["step"])
    assert mark.get_attribute("data-to-step") == str(rewind["to_step"])
    assert mark.get_attribute("data-correction") == "kl_coef*=2"
    assert mark.locator("text").text_content() == f"rewind 1 to step {rewind['to_step']} (kl_coef*=2)"
    assert "Rewind 1" in page.inner_text("[data-live=decision]")
    screenshot(page, "job-rewind.png")
