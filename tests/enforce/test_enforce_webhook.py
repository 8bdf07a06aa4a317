from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from enforce_http import JsonHandler, serve

from evalstop.service.adapters import AdapterError, JobRef, get_adapter
from evalstop.service.adapters._webhook import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    idempotency_key,
    verify_signature,
)
from evalstop.testing.adapter_contract import check_stop_sequence, check_unknown_job

SECRET = "s3cret-for-tests"


@dataclass
class Receiver:
    """A job launcher that accepts signed actions; ``script`` holds forced replies."""

    jobs: dict[str, str] = field(default_factory=lambda: {"j1": "running"})
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    script: list[int | str] = field(default_factory=list)
    bad_signatures: int = 0


class ReceiverHandler(JsonHandler):
    def do_POST(self) -> None:
        state: Receiver = self.server.state  # type: ignore[attr-defined]
        raw = self.body()
        ts, sig = self.headers.get(TIMESTAMP_HEADER, ""), self.headers.get(SIGNATURE_HEADER, "")
        if not verify_signature(SECRET, ts, raw, sig):
            state.bad_signatures += 1
            return self.reply(401, {"error": "bad signature"})
        if state.script:
            forced = state.script.pop(0)
            if forced == "hang":
                time.sleep(1.5)
            else:
                return self.reply(int(forced), {"error": "scripted"})
        self.act(state, json.loads(raw))

    def act(self, state: Receiver, msg: dict[str, Any]) -> None:
        ref, action = msg["external_ref"], msg["action"]
        state.keys.append(self.headers["Idempotency-Key"])
        if ref not in state.jobs:
            return self.reply(404, {"error": "unknown job"})
        state.log.append((action, ref, msg.get("checkpoint_uri")))
        if action in ("signal", "hard_stop"):
            state.jobs[ref] = "stopped"
        self.reply(200, {"stopped": state.jobs[ref] == "stopped"})


JOB = JobRef("job-1", "acme", "j1")


def make(url: str, **extra: Any) -> Any:
    return get_adapter("webhook", {"url": url, "secret": SECRET, "timeout_s": 1.0, **extra})


def test_stop_sequence_is_signed_ordered_and_idempotent() -> None:
    state = Receiver()
    with serve(ReceiverHandler, state) as url:
        check_stop_sequence(make(url), JOB, "s3://ckpt/step-400", timeout_s=5)
    assert state.bad_signatures == 0
    verbs = [a for a, _, _ in state.log]
    assert verbs[:2] == ["status", "pin"]  # pinned before any stop verb
    assert verbs.index("pin") < verbs.index("signal") < verbs.index("hard_stop")
    assert ("pin", "j1", "s3://ckpt/step-400") in state.log
    pin_key = idempotency_key("job-1", "pin", "s3://ckpt/step-400")
    assert pin_key.startswith("job-1:pin:") and pin_key.isascii() and len(pin_key) == len("job-1:pin:") + 32
    assert pin_key in state.keys and "job-1:signal" in state.keys


def test_unknown_job_counts_as_stopped() -> None:
    with serve(ReceiverHandler, Receiver()) as url:
        check_unknown_job(make(url), JobRef("job-2", "acme", "no-such-job"))


@pytest.mark.parametrize(("forced", "retryable"), [
    (503, True), (500, True), (429, True), ("hang", True), (400, False), (403, False), (302, False),
])
def test_failures_map_to_retryable_or_not(forced: int | str, retryable: bool) -> None:
    state = Receiver(script=[forced])
    with serve(ReceiverHandler, state) as url:
        adapter = make(url)
        with pytest.raises(AdapterError, match="webhook signal for job job-1") as err:
            adapter.signal(JOB)
        assert err.value.retryable is retryable
        adapter.signal(JOB)  # the retry goes through
    assert state.jobs["j1"] == "stopped"


def test_wrong_secret_is_a_permanent_error() -> None:
    state = Receiver()
    with serve(ReceiverHandler, state) as url:
        adapter = get_adapter("webhook", {"url": url, "secret": "wrong"})
        with pytest.raises(AdapterError, match="HTTP 401") as err:
            adapter.hard_stop(JOB)
    assert err.value.retryable is False and state.bad_signatures == 1 and state.jobs["j1"] == "running"


def test_connection_refused_is_retryable() -> None:
    with serve(ReceiverHandler, Receiver()) as url:
        pass  # server closed: the port now refuses
    with pytest.raises(AdapterError, match="ConnectError") as err:
        make(url).signal(JOB)
    assert err.value.retryable is True


def test_status_reply_without_stopped_is_an_error() -> None:
    class Odd(JsonHandler):
        def do_POST(self) -> None:
            self.body()
            self.reply(200, {"state": "weird"})

    with serve(Odd, None) as url, pytest.raises(AdapterError, match="lacks a boolean 'stopped'"):
        make(url).is_stopped(JOB)


def test_signature_rejects_stale_or_tampered() -> None:
    from evalstop.service.adapters._webhook import sign

    ts = str(int(time.time()))
    good = sign(SECRET, ts, b"{}")
    assert verify_signature(SECRET, ts, b"{}", good)
    assert not verify_signature(SECRET, ts, b"{ }", good)
    assert not verify_signature(SECRET, str(int(time.time()) - 3600), b"{}", good)


@pytest.mark.parametrize(("settings", "match"), [
    ({"secret": "x"}, "The 'url' setting of the webhook adapter"),
    ({"url": "http://x", "secret": ""}, "The 'secret' setting"),
    ({"url": "http://x", "secret": "x", "timeout_s": 0}, "The 'timeout_s' setting .* Got 0 instead"),
])
def test_bad_settings_name_the_setting(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_adapter("webhook", settings)


def test_repr_hides_secret() -> None:
    assert SECRET not in repr(make("http://127.0.0.1:9"))
