"""A small, faithful fake of the Kubernetes API server for the calls the adapter makes.

Real paths, verbs, status codes and ``Status`` bodies: 401 without the bearer token, 404 NotFound,
409 Conflict (scripted), 415 for a PATCH that is not a patch content type, 400 for a bad
``propagationPolicy``; DELETE answers 200 with a Success Status, or 202 with the object when
finalizers delay the removal. A controller thread plays the Job/JobSet controllers, Kueue, the
garbage collector and the kubelet: a suspended or deactivated job's pods go Terminating, then
disappear; a deleted job's pods and Workload are collected in the background.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from enforce_http import JsonHandler

TOKEN = "k8s-test-token"
KINDS = {  # plural -> (group/version, kind, pod label)
    "jobs": ("batch/v1", "Job", "batch.kubernetes.io/job-name"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobset.sigs.k8s.io/jobset-name"),
    "workloads": ("kueue.x-k8s.io/v1beta1", "Workload", ""),
}
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json",
               "application/json-patch+json", "application/apply-patch+yaml")
OBJ_RE = re.compile(r"^/apis/([^/]+/[^/]+)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$")
POD_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 400 else "Failure", "message": message, "reason": reason,
            "details": details or {}, "code": code}


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


@dataclass
class Cluster:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)  # (plural, ns, name)
    pods: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, query
    fail_next: list[int] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def create(self, plural: str, ns: str, name: str, *, queue: str | None = None, n_pods: int = 2,
               finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
        api, kind, pod_label = KINDS[plural]
        uid = str(uuid.uuid4())
        labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
        obj = {"apiVersion": api, "kind": kind, "metadata": {
            "name": name, "namespace": ns, "uid": uid, "labels": labels, "annotations": {},
            "finalizers": list(finalizers), "resourceVersion": "1"},
            "spec": {"suspend": False}, "status": {"active": n_pods, "conditions": []}}
        with self.lock:
            self.objects[(plural, ns, name)] = obj
            for i in range(n_pods):
                self.pods.append({"metadata": {"name": f"{name}-{i}", "namespace": ns,
                                               "labels": {pod_label: name},
                                               "ownerReferences": [_owner(api, kind, name, uid)]},
                                  "status": {"phase": "Running"}})
            if queue:
                self.objects[("workloads", ns, f"job-{name}-{uid[:5]}")] = {
                    "apiVersion": KINDS["workloads"][0], "kind": "Workload",
                    "metadata": {"name": f"job-{name}-{uid[:5]}", "namespace": ns, "uid": str(uuid.uuid4()),
                                 "labels": {"kueue.x-k8s.io/job-uid": uid},
                                 "ownerReferences": [_owner(api, kind, name, uid)]},
                    "spec": {"active": True, "queueName": queue}, "status": {"conditions": []}}
        return obj

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get((plural, ns, name))

    def live_pods(self, ns: str) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.pods if p["metadata"]["namespace"] == ns]

    # --- the controllers, one step per tick ----------------------------------------------------
    def tick(self) -> None:
        with self.lock:
            self.pods = [p for p in self.pods if "deletionTimestamp" not in p["metadata"]]
            for (plural, _ns, _name), obj in list(self.objects.items()):
                if plural == "workloads" and obj["spec"].get("active") is False:
                    self._evict(obj)
                elif plural != "workloads" and obj["spec"].get("suspend"):
                    self._suspend(obj)
            owners = {o["metadata"]["uid"] for o in self.objects.values()}
            for pod in self.pods:
                if owner_uid(pod) not in owners:
                    pod["metadata"]["deletionTimestamp"] = time.time()
            self.objects = {k: o for k, o in self.objects.items()
                            if owner_uid(o) is None or owner_uid(o) in owners}

    def _evict(self, workload: dict[str, Any]) -> None:
        conds = workload["status"]["conditions"]
        if not any(c["type"] == "Evicted" for c in conds):
            conds.append({"type": "Evicted", "status": "True", "reason": "Deactivated"})
        for obj in self.objects.values():  # Kueue suspends the owning job
            if obj["metadata"]["uid"] == owner_uid(workload):
                obj["spec"]["suspend"] = True

    def _suspend(self, obj: dict[str, Any]) -> None:
        for pod in self.pods:
            if owner_uid(pod) == obj["metadata"]["uid"]:
                pod["metadata"].setdefault("deletionTimestamp", time.time())
        obj["status"]["active"] = 0
        conds = obj["status"]["conditions"]
        if not any(c["type"] == "Suspended" for c in conds):
            conds.append({"type": "Suspended", "status": "True", "reason": "JobSuspended"})


class K8sHandler(JsonHandler):
    def handle_one(self, method: str) -> None:
        cluster: Cluster = self.server.state  # type: ignore[attr-defined]
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        raw = self.body()
        with cluster.lock:
            cluster.requests.append((method, url.path, url.query))
            forced = cluster.fail_next.pop(0) if cluster.fail_next else None
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.reply(401, status(401, "Unauthorized", "Unauthorized"))
        if forced is not None:
            return self.reply(forced, status(forced, "Conflict" if forced == 409 else "InternalError",
                                             "Operation cannot be fulfilled: the object has been modified; "
                                             "please apply your changes to the latest version and try again"))
        pod_match = POD_RE.match(url.path)
        if pod_match and method == "GET":
            return self.list_pods(cluster, pod_match.group(1), query)
        match = OBJ_RE.match(url.path)
        if not match or match.group(3) not in KINDS or KINDS[match.group(3)][0] != match.group(1):
            missing = "the server could not find the requested resource"
            return self.reply(404, status(404, "NotFound", missing))
        _, ns, plural, name = match.groups()
        with cluster.lock:
            if name is None:
                return self.list_objects(cluster, plural, ns, query, method)
            self.on_object(cluster, method, plural, ns, name, query, raw)

    def on_object(self, cluster: Cluster, method: str, plural: str, ns: str, name: str,
                  query: dict[str, str], raw: bytes) -> None:
        obj = cluster.objects.get((plural, ns, name))
        group = KINDS[plural][0].split("/")[0]
        if obj is None:
            return self.reply(404, status(404, "NotFound", f'{plural}.{group} "{name}" not found',
                                          {"name": name, "group": group, "kind": plural}))
        if method == "GET":
            return self.reply(200, obj)
        if method == "PATCH":
            if self.headers.get("Content-Type") not in PATCH_TYPES:
                unknown = "the body of the request was in an unknown format"
                return self.reply(415, status(415, "UnsupportedMediaType", unknown))
            merge(obj, json.loads(raw))
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion", "1")) + 1)
            return self.reply(200, obj)
        if method == "DELETE":
            return self.delete(cluster, plural, ns, name, obj, query)
        self.reply(405, status(405, "MethodNotAllowed", f"{method} is not supported"))

    def delete(self, cluster: Cluster, plural: str, ns: str, name: str, obj: dict[str, Any],
               query: dict[str, str]) -> None:
        policy = query.get("propagationPolicy", "Background")
        if policy not in ("Orphan", "Background", "Foreground"):
            return self.reply(400, status(400, "BadRequest", f"unsupported propagationPolicy {policy!r}"))
        if obj["metadata"]["finalizers"]:
            obj["metadata"].setdefault("deletionTimestamp", time.time())
            return self.reply(202, obj)
        del cluster.objects[(plural, ns, name)]
        self.reply(200, status(200, "", "", {"name": name, "group": KINDS[plural][0].split("/")[0],
                                             "kind": plural, "uid": obj["metadata"]["uid"]}))

    def list_objects(self, cluster: Cluster, plural: str, ns: str, query: dict[str, str],
                     method: str) -> None:
        if method != "GET":
            return self.reply(405, status(405, "MethodNotAllowed", f"{method} is not supported"))
        items = [o for (p, n, _), o in cluster.objects.items() if p == plural and n == ns
                 and _selected(o, query.get("labelSelector"))]
        self.reply(200, {"kind": KINDS[plural][1] + "List", "apiVersion": KINDS[plural][0],
                         "metadata": {"resourceVersion": "1"}, "items": items})

    def list_pods(self, cluster: Cluster, ns: str, query: dict[str, str]) -> None:
        items = [p for p in cluster.live_pods(ns) if _selected(p, query.get("labelSelector"))]
        self.reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    def do_GET(self) -> None:
        self.handle_one("GET")

    def do_PATCH(self) -> None:
        self.handle_one("PATCH")

    def do_DELETE(self) -> None:
        self.handle_one("DELETE")


def _selected(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, _, v in (term.partition("=") for term in selector.split(",")))


def run_controllers(cluster: Cluster, stop: threading.Event, period_s: float = 0.05) -> threading.Thread:
    def loop() -> None:
        while not stop.wait(period_s):
            cluster.tick()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _owner(api: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """An ownerReference as the API server stores it (the controller's, with blockOwnerDeletion)."""
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def owner_uid(obj: dict[str, Any]) -> str | None:
    """The uid of an object's controlling owner, or None."""
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r["uid"] for r in refs if r.get("controller")), None)
