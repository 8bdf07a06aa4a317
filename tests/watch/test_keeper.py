"""best/: hard links, an atomic switch, a copy across file systems, a best without checkpoint."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from evalstop.sidecar.keeper import BestKeeper
from evalstop.sidecar.presets import Settled, has_file, tracker


def save(root: Path, step: int, done: bool = True) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_text(f"w{step}")
    if done:
        (d / "trainer_state.json").write_text("{}")
    return d


def test_links_switches_atomically_and_drops_the_old_copy(tmp_path: Path) -> None:
    events: list[str] = []
    keeper = BestKeeper(tmp_path, "checkpoint-{step}", has_file("trainer_state.json"), metric="m",
                        on_event=events.append)
    first = save(tmp_path, 10)
    keeper.offer(10, 0.5)
    best = tmp_path / "best"
    assert os.stat(best / "model.safetensors").st_ino == os.stat(first / "model.safetensors").st_ino
    assert json.loads((best / "EVALSTOP.json").read_text())["step"] == 10
    save(tmp_path, 20, done=False)
    keeper.offer(20, 0.6)  # not complete yet: best/ still holds step 10
    assert (best / "model.safetensors").read_text() == "w10" and keeper.pending == (20, 0.6)
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text("{}")
    keeper.tick()
    assert (best / "model.safetensors").read_text() == "w20"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".evalstop-best-20", "best", "checkpoint-10",
                                                          "checkpoint-20"]
    assert [e.split(" (")[0] for e in events] == ["best/ now holds step 10", "best/ now holds step 20"]


def test_copies_where_links_cannot_cross(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    keeper = BestKeeper(tmp_path, "checkpoint-{step}", has_file("trainer_state.json"), metric="m")
    source = save(tmp_path, 5)
    keeper.offer(5, 1.0)
    kept = tmp_path / "best" / "model.safetensors"
    assert kept.read_text() == "w5" and os.stat(kept).st_ino != os.stat(source / "model.safetensors").st_ino
    assert json.loads((tmp_path / "best" / "EVALSTOP.json").read_text())["files_copied"] == 2


def test_best_without_checkpoint_is_given_up_when_a_later_one_lands(tmp_path: Path) -> None:
    events: list[str] = []
    keeper = BestKeeper(tmp_path, "checkpoint-{step}", has_file("trainer_state.json"), metric="m",
                        on_event=events.append)
    keeper.offer(15, 0.9)  # the framework saves every 10 steps: no checkpoint-15 will come
    save(tmp_path, 20)
    keeper.tick()
    assert keeper.pending is None and keeper.kept is None
    assert events == ["best eval at step 15 has no checkpoint (checkpoint-15 was not saved)"]


def test_foreign_best_directory_is_reported_not_replaced(tmp_path: Path) -> None:
    events: list[str] = []
    (tmp_path / "best").mkdir()
    keeper = BestKeeper(tmp_path, "checkpoint-{step}", has_file("trainer_state.json"), metric="m",
                        on_event=events.append)
    save(tmp_path, 1)
    keeper.offer(1, 0.1)
    assert "is not evalstop's best/ link" in events[0] and (tmp_path / "best").is_dir()


def test_readiness_rules(tmp_path: Path) -> None:
    step_dir = save(tmp_path, 3, done=False)
    ready = tracker("latest_checkpointed_iteration.txt")
    assert not ready(tmp_path, step_dir, 3)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert ready(tmp_path, step_dir, 3) and not ready(tmp_path, step_dir, 4)
    now = [0.0]
    settled = Settled(5.0, clock=lambda: now[0])
    assert not settled(tmp_path, step_dir, 3)
    now[0] = 6.0
    assert settled(tmp_path, step_dir, 3)
    (step_dir / "more").write_text("x")
    assert not settled(tmp_path, step_dir, 3)
