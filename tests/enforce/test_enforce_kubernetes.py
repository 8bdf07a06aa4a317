from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from enforce_http import serve
from k8s_fake import TOKEN, Cluster, K8sHandler, run_controllers

from evalstop.service.adapters import AdapterError, JobRef, NotOwned, get_adapter
from evalstop.service.adapters._kubernetes import PIN_ANNOTATION
from evalstop.testing.adapter_contract import check_stop_sequence, check_unknown_job, wait_stopped


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    state, stop = Cluster(), threading.Event()
    thread = run_controllers(state, stop)
    with serve(K8sHandler, state) as url:
        yield state, url
    stop.set()
    thread.join()


def make(url: str, **extra: Any) -> Any:
    return get_adapter("kubernetes", {"api_url": url, "token": TOKEN, "timeout_s": 2.0, **extra})


def calls(state: Cluster) -> list[tuple[str, str]]:
    return [(m, p.rsplit("/", 2)[-2]) for m, p, _ in state.requests if m != "GET"]


@pytest.mark.parametrize(("plural", "kind"), [("jobs", "Job"), ("jobsets", "JobSet")])
def test_plain_job_pin_suspend_delete(cluster: tuple[Cluster, str], plural: str, kind: str) -> None:
    state, url = cluster
    state.create(plural, "team-a", "rlhf-7")
    job = JobRef("job-7", "acme", "team-a/rlhf-7", {"kind": kind})
    adapter = make(url)
    adapter.pin_checkpoint(job, "s3://ckpt/rlhf-7/step-900")
    obj = state.get(plural, "team-a", "rlhf-7")
    assert obj is not None and obj["metadata"]["annotations"][PIN_ANNOTATION] == "s3://ckpt/rlhf-7/step-900"
    check_stop_sequence(adapter, job, "s3://ckpt/rlhf-7/step-900", grace_s=0.2, timeout_s=5)
    assert state.get(plural, "team-a", "rlhf-7") is None and state.live_pods("team-a") == []
    verbs = [m for m, _ in calls(state)]
    assert verbs[:4] == ["PATCH", "PATCH", "PATCH", "PATCH"]  # 2 pins, 2 suspends, before any delete
    deletes = [q for m, _, q in state.requests if m == "DELETE"]
    assert deletes and all(q == "propagationPolicy=Background" for q in deletes)


def test_kueue_job_is_deactivated_not_suspended(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    state.create("jobs", "team-b", "dpo-3", queue="gpu-queue")
    job = JobRef("job-3", "acme", "team-b/dpo-3")
    adapter = make(url)
    adapter.pin_checkpoint(job, "/ckpt/dpo-3")
    adapter.signal(job)
    workloads = [o for (p, _, _), o in state.objects.items() if p == "workloads"]
    assert [w["spec"]["active"] for w in workloads] == [False]
    assert not any(m == "PATCH" and "/jobs/" in p for m, p, _ in state.requests[2:])  # Kueue owns suspend
    assert wait_stopped(adapter, job, timeout_s=5)  # evicted: quota back, pods gone, job still there
    obj = state.get("jobs", "team-b", "dpo-3")
    assert obj is not None and obj["spec"]["suspend"] is True
    adapter.hard_stop(job)
    assert wait_stopped(adapter, job, timeout_s=5) and state.get("jobs", "team-b", "dpo-3") is None


def test_explicit_workload_option(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    state.create("jobs", "ns", "j", queue="q")
    name = next(n for (p, _, n) in state.objects if p == "workloads")
    make(url).signal(JobRef("job-j", "acme", "ns/j", {"workload": name}))
    assert state.objects[("workloads", "ns", name)]["spec"]["active"] is False


def test_a_workload_option_naming_another_jobs_workload_is_refused(cluster: tuple[Cluster, str]) -> None:
    """A tenant sharing a namespace cannot deactivate a neighbour's Workload by naming it."""
    state, url = cluster
    state.create("jobs", "ns", "mine", queue="q")
    state.create("jobs", "ns", "theirs", queue="q")
    theirs = next(n for (p, _, n) in state.objects if p == "workloads" and n.startswith("job-theirs-"))
    with pytest.raises(NotOwned, match="does not belong to ns/mine"):
        make(url).signal(JobRef("job-m", "acme", "ns/mine", {"workload": theirs}))
    assert state.objects[("workloads", "ns", theirs)]["spec"]["active"] is True
    assert not any(m == "PATCH" for m, _, _ in state.requests)


def test_delete_held_by_finalizer_is_202_and_not_stopped_yet(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    state.create("jobs", "ns", "held", finalizers=("example.com/keep",))
    job = JobRef("job-h", "acme", "ns/held")
    adapter = make(url)
    adapter.hard_stop(job)
    obj = state.get("jobs", "ns", "held")
    assert obj is not None and "deletionTimestamp" in obj["metadata"]
    assert adapter.is_stopped(job) is False
    with state.lock:
        obj["metadata"]["finalizers"] = []
        del state.objects[("jobs", "ns", "held")]
    assert wait_stopped(adapter, job, timeout_s=5)


def test_unknown_job_counts_as_stopped(cluster: tuple[Cluster, str]) -> None:
    _, url = cluster
    check_unknown_job(make(url), JobRef("job-x", "acme", "ns/never-existed"))


@pytest.mark.parametrize(("code", "retryable"), [(409, True), (500, True), (503, True), (422, False)])
def test_errors_are_classified(cluster: tuple[Cluster, str], code: int, retryable: bool) -> None:
    state, url = cluster
    state.create("jobs", "ns", "j")
    state.fail_next.append(code)
    with pytest.raises(AdapterError, match=f"k8s delete for job job-j: HTTP {code}") as err:
        make(url).hard_stop(JobRef("job-j", "acme", "ns/j"))
    assert err.value.retryable is retryable


def test_bad_token_is_permanent(cluster: tuple[Cluster, str]) -> None:
    state, url = cluster
    state.create("jobs", "ns", "j")
    with pytest.raises(AdapterError, match="HTTP 401") as err:
        make(url, token="wrong").signal(JobRef("job-j", "acme", "ns/j"))
    assert err.value.retryable is False


@pytest.mark.parametrize(("ref", "options", "match"), [
    ("just-a-name", {}, "external_ref must be 'namespace/name'"),
    ("ns/a/b", {}, "external_ref must be 'namespace/name'"),
    ("ns/j", {"kind": "Deployment"}, "option 'kind' must be one of"),
])
def test_bad_reference_is_permanent(ref: str, options: dict[str, Any], match: str) -> None:
    adapter = make("http://127.0.0.1:9")
    with pytest.raises(AdapterError, match=match) as err:
        adapter.hard_stop(JobRef("job-j", "acme", ref, options))
    assert err.value.retryable is False


def test_ownership_by_labels_at_registration_and_before_each_action(cluster: tuple[Cluster, str]) -> None:
    """Two tenants share namespace team-a and are told apart by a label (issue 22). The object's
    labels decide, also at registration (``must_exist``); an object not created yet may be
    registered (the namespace bounds the name) and is checked again before any action. A refusal
    names the label key, never the other tenant's value."""
    state, url = cluster
    obj = state.create("jobs", "team-a", "train-1")
    obj["metadata"]["labels"]["team"] = "alice"
    adapter = make(url)

    def ref(tenant: str, name: str = "train-1") -> JobRef:
        return JobRef("j", tenant, f"team-a/{name}", scope={"kubernetes": {
            "namespaces": ["team-a"], "labels": {"team": tenant}}})

    adapter.check_owner(ref("alice"), must_exist=True)
    with pytest.raises(NotOwned, match=r"labels \['team'\]") as refused:
        adapter.check_owner(ref("mallory"), must_exist=True)
    assert "alice" not in str(refused.value)
    adapter.check_owner(ref("mallory", "train-2"), must_exist=True)  # not created yet: registrable
    state.create("jobs", "team-a", "train-2")["metadata"]["labels"]["team"] = "alice"
    with pytest.raises(NotOwned):  # created by alice: mallory's registration may not act on it
        adapter.check_owner(ref("mallory", "train-2"))
