"""The job list at 1,000 jobs in a real headless Chromium against a real ``evalstop serve``
(issue 22, console items 4 and 5): the database pages, sorts and filters; the 3 s refresh fetches
only the page shown, and the keyboard focus stays put when it does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ._support import ADMIN, screenshot, wait_for

httpx = pytest.importorskip("httpx")

N_JOBS = 1000
#: jobs whose rule fires, at these steps (the old alphabetical sort put 750 before 700 and 2200)
FIRED = {3: 750, 10: 700, 200: 2200, 640: 90, 999: 10_000}


class Many:
    """One tenant with N_JOBS dry-run jobs, registered through the JSON API."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=30)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        r = self.http.post("/v1/tenants", json={"name": "team-p"}, headers=admin)
        assert r.status_code == 201, r.text
        self.token = r.json()["token"]
        self.auth = {"Authorization": f"Bearer {self.token}"}
        self.ids: list[str] = []
        for i in range(N_JOBS):
            body = {"external_ref": f"ref-{i:04d}", "target": "dry-run", "name": f"p-{i:04d}",
                    "detector": "evalstop:k=2", "grace_period_s": 0}
            r = self.http.post("/v1/jobs", json=body, headers=self.auth)
            assert r.status_code == 201, r.text
            self.ids.append(r.json()["id"])
        for i, step in FIRED.items():
            values = [(step - 3, 0.50), (step - 2, 0.61), (step - 1, 0.58), (step, 0.57)]
            self.post(self.ids[i], [{"step": s, "value": v} for s, v in values])

    def post(self, job_id: str, scores: list[dict[str, Any]]) -> None:
        r = self.http.post(f"/v1/jobs/{job_id}/scores", json={"scores": scores}, headers=self.auth)
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def many(server: tuple[str, Path]) -> Many:
    return Many(server[0])


@pytest.fixture
def page(browser: Any, many: Many) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(many.base + "/ui/jobs")
    page.fill("input[name=token]", many.token)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/jobs")
    yield page
    context.close()


def names(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("#job-rows tr[data-job-id] td:first-child",
                                          "cs => cs.map(c => c.innerText)"))


def test_a_thousand_jobs_are_paged(page: Any, many: Many) -> None:
    first = names(page)
    assert first == [f"p-{i:04d}" for i in range(N_JOBS - 1, N_JOBS - 51, -1)]  # newest first
    assert "(page 1 of 20)" in page.inner_text("#page-note")
    page.click("#pager a[rel=next]")
    page.wait_for_url("**page=2**")
    assert names(page) == [f"p-{i:04d}" for i in range(N_JOBS - 51, N_JOBS - 101, -1)]
    page.click("#pager a:has-text('last')")
    page.wait_for_url("**page=20**")
    assert names(page) == [f"p-{i:04d}" for i in range(49, -1, -1)]
    assert page.inner_text("#pager strong[aria-current=page]") == "20"
    screenshot(page, "jobs-paged.png")


def test_decisions_sort_as_numbers_and_a_filter_pages_its_matches(page: Any, many: Many) -> None:
    page.click("th a:has-text('Decision')")
    page.wait_for_url("**sort=decision**")
    page.click("th a:has-text('Decision')")  # second click: descending, the decided jobs first
    page.wait_for_url("**dir=desc**")
    texts = page.eval_on_selector_all("#job-rows td.decision", "cs => cs.map(c => c.innerText)")
    decided = [t for t in texts if t]
    assert [int(re.sub(r"\D", "", t)) for t in decided] == sorted(FIRED.values(), reverse=True)
    page.fill("input[name=q]", "p-05")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**q=p-05**")
    assert "of 100 (page 1 of 2)" in page.inner_text("#page-note")
    assert all(n.startswith("p-05") for n in names(page)) and len(names(page)) == 50
    page.click("#pager a[rel=next]")
    page.wait_for_url("**page=2**")
    assert "q=p-05" in page.url and len(names(page)) == 50


def test_the_refresh_fetches_only_the_page_shown_and_keeps_the_focus(page: Any, many: Many) -> None:
    page.goto(many.base + "/ui/jobs?page=3")
    fetched: list[Any] = []
    page.on("response", lambda r: fetched.append(r) if "partial=rows" in r.url else None)
    target = many.ids[N_JOBS - 101]  # p-0899: the first row of page 3
    link = f"#job-rows tr[data-job-id='{target}'] a"
    page.focus(link)
    many.post(target, [{"step": 123_456, "value": 0.5}])
    row = f"#job-rows tr[data-job-id='{target}']"
    wait_for(lambda: "step 123456" in page.inner_text(row), 15, "the polled rows to show the new eval")
    focused = page.evaluate("() => { const a = document.activeElement, tr = a.closest('tr'); "
                            "return [a.tagName, tr && tr.dataset.jobId]; }")
    assert focused == ["A", target]
    assert fetched and all("page=3" in r.url for r in fetched)
    body = fetched[-1].body()
    assert body.count(b"<tr data-job-id=") == 50 and len(body) < 40_000
    assert names(page)[0] == "p-0899"
