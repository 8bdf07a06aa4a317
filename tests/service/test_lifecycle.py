"""A job's state changes in one place: ``service/lifecycle.py`` declares the states and the
transitions, refuses any other with a message that names both states, and is the only caller of
the store function that writes the state column. The scan below reads every module of
``service/`` and fails on any other code that writes a job's state."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import evalstop
from evalstop.service import lifecycle
from evalstop.service.errors import Conflict
from evalstop.service.lifecycle import RUNNING, STATES, STOP_FAILED, STOPPED, STOPPING, IllegalTransition

SERVICE = Path(evalstop.__file__).parent / "service"
LIFECYCLE = SERVICE / "lifecycle.py"
#: The one statement that writes the state column, and the function it lives in.
WRITER = (SERVICE / "store" / "job.py", "set_state")
SQL_STATE_WRITE = re.compile(r"update\s+\w*jobs\b.*\bset\b.*\bstate\s*=", re.IGNORECASE | re.DOTALL)


def _is_state(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in STATES


def _named_state(node: ast.AST) -> bool:
    """``state``, ``x.state`` or ``x["state"]``."""
    if isinstance(node, ast.Name):
        return node.id == "state"
    if isinstance(node, ast.Attribute):
        return node.attr == "state"
    key = node.slice if isinstance(node, ast.Subscript) else None
    return isinstance(key, ast.Constant) and key.value == "state"


def writes(source: str) -> list[tuple[int, str, str]]:
    """Every place in ``source`` that writes a job's state: ``(line, enclosing function, what)``."""
    tree = ast.parse(source)
    within = {}  # node -> the name of the innermost function around it
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        within.update((n, func.name) for n in ast.walk(func))  # inner functions are walked later
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        name = within.get(node, "<module>")
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee == "set_state":
                found.append((node.lineno, name, "calls set_state"))
            for kw in node.keywords:
                if kw.arg == "state" and (callee in ("values", "update") or _is_state(kw.value)):
                    found.append((node.lineno, name, f"{callee}(state=...)"))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "state" and _is_state(value):
                    found.append((node.lineno, name, f'"state": {value.value!r}'))  # type: ignore[attr-defined]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value or ast.Constant(None)
            if any(_named_state(t) for t in targets) and any(_is_state(n) for n in ast.walk(value)):
                found.append((node.lineno, name, "state = <a state literal>"))
        elif isinstance(node, ast.Constant) and SQL_STATE_WRITE.search(str(node.value)):
            found.append((node.lineno, name, "SQL UPDATE of jobs.state"))
    return sorted(set(found))


def test_only_the_lifecycle_writes_a_job_state() -> None:
    outside = []
    for path in sorted(SERVICE.rglob("*.py")):
        if path == LIFECYCLE:
            continue
        for line, func, what in writes(path.read_text(encoding="utf-8")):
            if (path, func) == WRITER and what == "values(state=...)":
                continue  # the statement itself, called by the lifecycle only (the line above)
            outside.append(f"{path.relative_to(SERVICE)}:{line} in {func}: {what}")
    assert not outside, "job state written outside service/lifecycle.py:\n" + "\n".join(outside)


def test_the_lifecycle_is_the_writers_only_caller() -> None:
    assert [w[2] for w in writes(LIFECYCLE.read_text())] == ["calls set_state"]
    writer = writes(WRITER[0].read_text())
    assert [(f, w) for _, f, w in writer] == [("set_state", "values(state=...)")]


@pytest.mark.parametrize("code", [
    'job_store.update(conn, job_id, state="stopped", stopped_at=now)',
    'conn.execute(jobs.update().where(jobs.c.id == job_id).values(state=new))',
    'row = {"id": job_id, "state": "running"}',
    'state = state if shadow else "stopping"',
    'job["state"] = "stop_failed"',
    'conn.execute(sa.text("UPDATE jobs SET state = :s WHERE id = :id"), params)',
    'job_store.set_state(conn, job_id, "stopped")',
])
def test_the_scan_finds_each_way_of_writing_a_state(code: str) -> None:
    assert writes(f"def f():\n    {code}\n")


@pytest.mark.parametrize("code", [
    'if job["state"] != "running": pass',
    'filters = Filters(state=params.get("state", ""))',
    'conn.execute(jobs.update().where(jobs.c.id == job_id).values(monitor_state=text))',
    'result = IngestResult(state=state)',
    'sql = "UPDATE jobs SET monitor_state = :m WHERE id = :id"',
])
def test_the_scan_leaves_reads_alone(code: str) -> None:
    assert writes(f"def f():\n    {code}\n") == []


@pytest.mark.parametrize(("before", "after"), [
    (RUNNING, STOPPING), (RUNNING, STOP_FAILED), (STOPPING, STOPPED), (STOPPING, STOP_FAILED),
    (STOPPING, RUNNING), (STOP_FAILED, STOPPING), (STOP_FAILED, STOPPED), (RUNNING, RUNNING),
])
def test_allowed_transitions(before: str, after: str) -> None:
    lifecycle.check("j1", before, after)


@pytest.mark.parametrize(("before", "after", "message"), [
    (STOPPED, STOPPING, "Job j1 cannot go from stopped to stopping; from stopped it may go to: none"),
    (RUNNING, STOPPED, "Job j1 cannot go from running to stopped; from running it may go to: stopping, "
                       "stop_failed"),
    (STOP_FAILED, RUNNING, "from stop_failed it may go to: stopping, stopped"),
    (RUNNING, "released", "'released' is not a job state"),
])
def test_a_disallowed_transition_names_the_states(before: str, after: str, message: str) -> None:
    with pytest.raises(IllegalTransition, match=re.escape(message)) as caught:
        lifecycle.check("j1", before, after)
    assert isinstance(caught.value, Conflict)  # a request that asks for one gets a 409


def test_every_state_is_reachable_from_the_initial_one() -> None:
    seen, todo = {lifecycle.INITIAL}, [lifecycle.INITIAL]
    while todo:
        for nxt in lifecycle.allowed_from(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(STATES)
    assert lifecycle.allowed_from(STOPPED) == ()  # final
