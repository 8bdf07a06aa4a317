"""Every fenced shell command in README.md and docs/*.md runs, in a fresh clone with a fresh venv
made exactly as the README makes it (its first block), with the venv active as the README says.

A block may be marked by an HTML comment on the line before it:
- ``<!-- docs-test: skip (reason) -->``: not run; the reason is required (too slow, or it needs
  something the test cannot start, such as a Ray cluster) and is printed as the skip reason;
- ``<!-- docs-test: server -->``: it starts a server in the background: the block runs as
  written while another server (one that answers every request) holds port 8000, the port a
  quick start is tempted to assume, and the test stops whatever the block left running.
Blocks run in document order (README first), one bash process each, ``set -euo pipefail``. pip
uses its normal cache, so the installs cost little after the first run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
_BLOCK = re.compile(r"(?:<!-- docs-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Block:
    source: str
    line: int
    body: str
    mark: str

    @property
    def skip_reason(self) -> str | None:
        m = re.fullmatch(r"skip \((.+)\)", self.mark)
        return m.group(1) if m else None


def shell_blocks() -> list[Block]:
    blocks = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            if m.group("lang") in SHELL:
                line = text[:m.start("body")].count("\n") + 1
                where = f"{path.relative_to(ROOT)}:{line}"
                blocks.append(Block(where, line, m.group("body"), m.group("mark") or ""))
    return blocks


def test_every_shell_block_is_run_or_says_why_not() -> None:
    blocks = shell_blocks()
    assert blocks and "python3 -m venv .venv" in blocks[0].body  # the README's install comes first
    for block in blocks:
        assert block.mark in ("", "server") or block.skip_reason, f"{block.source}: bad mark {block.mark!r}"


class _AnswersEverything(BaseHTTPRequestHandler):
    """Another service: 200 and a JSON body to every request, whatever it asks."""

    def _yes(self) -> None:
        body = b'{"status": "ok", "token": "not-yours", "id": "not-yours"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _yes

    def log_message(self, *_args: object) -> None:
        pass


@contextlib.contextmanager
def another_server_on_8000() -> Iterator[None]:
    """Port 8000 held by a server that answers every request, while the block runs (if something
    holds it already, that is the same situation)."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", 8000), _AnswersEverything)
    except OSError:
        yield
        return
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The project's files as a fresh clone has them (tracked and new, not ignored), set up by the
    README's first block (the install); returns the folder and that block's exit code and output."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    dest = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    first = shell_blocks()[0]
    code, out = _run_block(dest, first.body)
    return dest, code, out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "EVALSTOP_PHILLY") and not k.startswith("PYTEST")}
    venv_bin = os.environ.get("VIRTUAL_ENV")
    if venv_bin:  # the test's own venv must not shadow the fresh one
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(venv_bin))
    return env


def _run_block(folder: Path, body: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    script = ("set -euo pipefail\n"
              "if [ -f .venv/bin/activate ]; then source .venv/bin/activate; fi\n" + body)
    log = folder / ".docs-test.log"
    with log.open("w") as out:  # a file, not a pipe: a background server must not hold it open
        proc = subprocess.Popen(["bash", "-c", script], cwd=folder, env=env or _env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            code = -1
        finally:  # whatever the block left in the background (a server) goes with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    return code, log.read_text(errors="replace")


@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: b.source)
def test_the_command_runs_as_documented(clone: tuple[Path, int, str], block: Block) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    folder, code, out = clone
    if block is not shell_blocks()[0] and block.body != shell_blocks()[0].body:
        with another_server_on_8000() if block.mark == "server" else contextlib.nullcontext():
            code, out = _run_block(folder, block.body)
    assert code == 0, f"{block.source} failed ({code}):\n{block.body}\n--- output ---\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]


@pytest.mark.parametrize("block", [b for b in shell_blocks() if b.mark == "server"], ids=lambda b: b.source)
def test_a_server_block_runs_here_while_another_server_holds_8000(tmp_path: Path, block: Block) -> None:
    """The same block in this environment (its installs left out), without a fresh clone: the
    quick start must reach the server it started, not the one on 8000."""
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("the quick start needs curl and jq")
    pytest.importorskip("uvicorn", reason="the quick start needs the service extra")
    body = "\n".join(line for line in block.body.splitlines() if not line.startswith("pip install"))
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    with another_server_on_8000():
        code, out = _run_block(tmp_path, body, env)
    assert code == 0, f"{block.source} failed ({code}):\n{body}\n--- output ---\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]
    assert '"decision":"stop"' in out and '"best_checkpoint_uri":"s3://ckpt/100"' in out, out[-4000:]
