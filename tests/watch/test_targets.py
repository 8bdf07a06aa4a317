"""Attach (--pid) stops a running process group; a SIGINT to the sidecar reaches the wrapped
command, which decides what to do, and the sidecar exits with its status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalstop.cli import main

ROOT = Path(__file__).resolve().parents[2]
WRITER = """import json, sys, time
f = open(sys.argv[1], "a")
for i, v in enumerate([0.3, 0.5, 0.6, 0.5, 0.4, 0.3, 0.2], 1):
    f.write(json.dumps({"step": i, "acc": v}) + "\\n"); f.flush(); time.sleep(0.2)
time.sleep(60)
"""


def test_attach_to_pid_stops_its_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "m.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(log)], start_new_session=True)
    try:
        code = main(["watch", "--pid", str(proc.pid), "--metric", "acc", "--log", "jsonl",
                     "--logdir", str(log), "--detector", "evalstop:k=2", "--poll", "0.05", "--grace", "5"])
        assert code == 3
        assert proc.wait(timeout=10) == -signal.SIGTERM
        said = f"stopping pid {proc.pid}: SIGTERM to process group {proc.pid}; it ended"
        assert said in capsys.readouterr().err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigint_to_the_sidecar_reaches_the_command(tmp_path: Path) -> None:
    child = ("import signal, sys, time\n"
             f"def stop(n, f): open({str(tmp_path / 'got')!r}, 'w').write(str(n)); sys.exit(5)\n"
             "signal.signal(signal.SIGINT, stop)\n"
             f"open({str(tmp_path / 'up')!r}, 'w').close()\n"
             "time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    sidecar = subprocess.Popen([sys.executable, "-m", "evalstop.cli", "watch", "--metric", "acc", "--logdir",
                                str(tmp_path / "tb"), "--poll", "0.05", "--", sys.executable, "-c", child],
                               env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 5, err
    assert (tmp_path / "got").read_text() == str(int(signal.SIGINT))
    assert "exited with status 5 before its first eval" in err
