"""The console in a real headless Chromium against a real ``evalstop serve`` on loopback."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

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
    counted = page.eval_on_selector_all("#curve circle.counted", "cs => cs.map(c => Number(c.dataset.step))")
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


def _attempt(start: int, base: float) -> list[tuple[int, float]]:
    """One attempt from ``start``: six evals rising from ``base``, then four falling (k=3 fires)."""
    rise = [(start + 100 * i, round(base + 0.02 * i + 0.003 * math.sin(i), 4)) for i in range(1, 7)]
    top = rise[-1][1]
    return rise + [(rise[-1][0] + 100 * i, round(top - 0.025 * i, 4)) for i in range(1, 5)]


def rewound_job(world: World, name: str, rewinds: int, stopped: bool) -> tuple[str, list[dict[str, Any]]]:
    """A job that the service rewound ``rewinds`` times (posting through the API as a training
    job would: each attempt from the step it went back to); then stopped by the rule, or running
    a few evals into its next attempt. Returns the job id and its decisions."""
    job = world._job(world.a, name, detector="evalstop:k=3,against=best", gpus=4, on_detect="rewind",
                     max_rewinds=rewinds, correction="kl_coef*=2")
    start, base = 0, 0.40
    for n in range(rewinds + 1):
        curve = _attempt(start, base)
        if n == rewinds and not stopped:
            curve = curve[:4]  # the current attempt, still rising
        for step, value in curve:
            r = world.http.post(f"/v1/jobs/{job}/scores", headers=world.auth(world.a), json={
                "step": step, "value": value, "attempt": n, "checkpoint_uri": f"s3://ckpt/{name}/{n}/{step}"})
            assert r.status_code == 200, r.text
            reply = r.json()
            if reply["decision"] in ("rewind", "stop") and reply["decided_now"]:
                break
        if n < rewinds:
            assert reply["decision"] == "rewind", reply
            start, base = reply["rewind"]["to_step"], value + 0.05
    state = "stopped" if stopped else "running"
    wait_for(lambda: world.get(world.a, f"/v1/jobs/{job}")["state"] == state, 20, f"the job to be {state}")
    return job, world.get(world.a, f"/v1/jobs/{job}/decisions")


def _shown_chart(page: Any) -> str:
    """The id of the curve drawing this screen shows (wide or narrow)."""
    return str(page.evaluate("""() => [...document.querySelectorAll('svg[aria-label="eval curve"]')]
        .find(s => s.getBoundingClientRect().width > 0).id"""))


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize(("rewinds", "stopped"), [(1, False), (1, True), (2, False), (2, True)])
def test_a_rewound_job_is_drawn_from_its_stored_rewinds(
    browser: Any, world: World, rewinds: int, stopped: bool, width: int
) -> None:
    """One segment per attempt, a marker per rewind with its step and correction, the final stop
    marked and no stop marker while the job runs; at 390 px the chart's text is 10 px or more."""
    name = f"a-olmo-{rewinds}-rewinds-{'stopped' if stopped else 'running'}-{width}"
    job, decisions = rewound_job(world, name, rewinds, stopped)
    assert [d["decision"] for d in decisions] == ["rewind"] * rewinds + (["stop"] if stopped else [])
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        sign_in(page, world, world.a["token"], "alice")
        row = page.locator(f"#job-rows tr[data-job-id='{job}'] .decision").inner_text()
        last = decisions[-1]
        assert row == (f"stop at step {last['step']}" if stopped else f"rewound at step {last['step']}")
        page.goto(f"{world.base}/ui/jobs/{job}")
        chart = _shown_chart(page)
        assert chart == ("curve" if width == 1280 else "narrow-curve")
        attempts = page.eval_on_selector_all(f"#{chart} polyline.attempt",
                                             "ps => ps.map(p => p.dataset.attempt)")
        assert attempts == [str(n) for n in range(1, rewinds + 2)]
        marks = page.eval_on_selector_all(f"#{chart} g.marker-rewind", """gs => gs.map(g =>
            [g.dataset.step, g.dataset.toStep, g.dataset.correction, g.querySelector('text').textContent])""")
        assert marks == [[str(d["step"]), str(d["best_step"]), "kl_coef*=2",
                          f"rewind {i} to step {d['best_step']} (kl_coef*=2)"]
                         for i, d in enumerate(decisions[:rewinds], start=1)]
        stop = page.locator(f"#{chart} g.marker-stop")
        if stopped:
            assert stop.get_attribute("data-step") == str(last["step"])
            assert stop.locator("text").text_content() == f"stop (step {last['step']})"
        else:
            assert stop.count() == 0
        decision = page.inner_text("[data-live=decision]")
        assert decision.count("Rewind ") == rewinds and "override" not in decision
        assert ("by the rule at step" in decision) == stopped
        assert "next eval opportunity" not in page.inner_text("#next-eval") or not stopped
        texts = page.evaluate("""id => { const svg = document.getElementById(id);
            const k = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
            const vb = svg.viewBox.baseVal;
            return [...svg.querySelectorAll('text')].map(t => { const b = t.getBBox();
              return [t.textContent, parseFloat(getComputedStyle(t).fontSize) * k,
                      b.x >= 0 && b.y >= 0 && b.x + b.width <= vb.width
                      && b.y + b.height <= vb.height]; }); }""",
                              chart)
        small = [(t, round(px, 1)) for t, px, _ in texts if px < 10]
        assert small == [], small
        outside = [t for t, _, inside in texts if not inside]
        assert outside == [], outside
        assert _overflow(page) <= 0
        screenshot(page, f"rewind-{rewinds}-{'stopped' if stopped else 'running'}-{width}.png")
    finally:
        context.close()


def test_rule_names_do_not_break_mid_word_at_390_px(browser: Any, world: World) -> None:
    world._job(world.a, "a-cusum-watched", detector="cusum", gpus=1)
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        sign_in(page, world, world.a["token"], "alice")
        broken = page.eval_on_selector_all("#job-rows td code", """cs => cs.filter(c => {
            const r = document.createRange(); r.selectNodeContents(c);
            return r.getClientRects().length > 1; }).map(c => c.textContent)""")
        assert broken == []
        assert "cusum" in page.eval_on_selector_all("#job-rows td code", "cs => cs.map(c => c.textContent)")
        screenshot(page, "jobs-390.png")
    finally:
        context.close()
