"""docs/deploy.md's commands: none can run in the docs test (they need root podman or a
Kubernetes cluster), so each block says why, and this test ties each command to what runs it:
the no-registry build is the one CI runs (conftest.BUILD_OPTIONS), every ``stack.sh`` command is
one test_compose runs, every path ``kubectl`` is given exists (and test_manifests renders the
kustomizations), and the Secrets the doc makes are exactly those the manifests use, with their keys."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

from test_docs_commands import shell_blocks  # tests/ is on the path

from .conftest import BUILD_OPTIONS
from .test_manifests import BASE

ROOT = Path(__file__).resolve().parents[2]
DOC = "docs/deploy.md"


def commands() -> list[tuple[str, str]]:
    """(block mark, command) for each command line of the doc's shell blocks, continuations joined."""
    found = []
    for block in shell_blocks():
        if not block.source.startswith(DOC):
            continue
        for line in block.body.replace("\\\n", " ").splitlines():
            line = line.split(" # ", 1)[0].strip()
            if line and not line.startswith("#"):
                found.append((block.mark, line))
    return found


def test_every_block_says_why_it_does_not_run_here() -> None:
    marks = {mark for mark, _ in commands()}
    assert marks and all(re.fullmatch(r"skip \(needs .+\)", m) for m in marks), marks


def test_the_no_registry_build_is_the_one_ci_runs() -> None:
    builds = [c for _, c in commands() if c.startswith("deploy/container/build.sh")]
    assert f"deploy/container/build.sh {' '.join(BUILD_OPTIONS)} --tag localhost/evalstop:0.1.0" in builds


def test_every_stack_command_is_one_the_compose_test_runs() -> None:
    source = (ROOT / "tests" / "deploy" / "test_compose.py").read_text()
    run = set(re.findall(r'stack\.sh\("([\w-]+)"', source))
    documented = {m for _, c in commands() for m in re.findall(r"deploy/compose/stack\.sh ([\w-]+)", c)}
    assert documented and documented <= run, documented - run


def test_every_path_given_to_kubectl_exists() -> None:
    for _, command in commands():
        if not command.startswith("kubectl") and "| kubectl" not in command:
            continue
        words = shlex.split(command.split("|")[-1] if command.startswith("sed") else command)
        for flag, value in itertools.pairwise(words):
            if flag in ("-k", "-f") and value != "-":
                assert (ROOT / value).exists(), command
    assert (ROOT / "deploy/kubernetes/tenant-rolebinding.yaml").exists()


def test_the_secrets_made_by_hand_are_the_ones_the_manifests_use() -> None:
    made: dict[str, set[str]] = {}
    for _, command in commands():
        m = re.match(r"kubectl -n evalstop create secret generic ([\w-]+) (.*)", command)
        if m:
            keys = re.findall(r"--from-(?:literal|file)=([\w.-]+)", m.group(2))
            made.setdefault(m.group(1), set()).update(keys)
    used: dict[str, set[str]] = {}
    for obj in BASE:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    used.setdefault(ref["name"], set()).add(ref["key"])
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                used.setdefault(volume["secret"]["secretName"], set()).update(
                    i["key"] for i in volume["secret"]["items"])
    assert made == used
