"""The TensorBoard poller on real event files written with tensorboard's own writer."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="needs the pull extra: pip install -e '.[pull]'")

from pull_sinks import RecordingSink
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from evalstop.service.pull import make_poller


def simple(tag: str, value: float) -> summary_pb2.Summary:  # PyTorch SummaryWriter / TF1 form
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])


def write(writer: EventFileWriter, step: int, summary: summary_pb2.Summary) -> None:
    writer.add_event(event_pb2.Event(wall_time=1_700_000_000.0 + step, step=step, summary=summary))
    writer.flush()


@pytest.mark.parametrize("form", ["simple_value", "tensor"])
def test_reads_new_events_incrementally(tmp_path: Path, form: str) -> None:
    logdir = tmp_path / "run-1"
    writer = EventFileWriter(str(logdir))
    def make(value: float) -> summary_pb2.Summary:
        return simple("eval/score", value) if form == "simple_value" else scalar_pb("eval/score", value)

    for step, value in [(10, 0.3), (20, 0.45)]:
        write(writer, step, make(value))
    write(writer, 20, simple("train/loss", 2.0))
    sink = RecordingSink()
    poller = make_poller("tensorboard", sink, logdirs={"job-1": logdir}, tag="eval/score",
                         checkpoint_template="{logdir}/ckpt-{step}")
    assert poller.poll().delivered == 2
    rec = sink.calls[0][1][1]
    assert (rec.step, rec.metric, rec.ts) == (20, "eval/score", 1_700_000_020.0)
    assert rec.value == pytest.approx(0.45) and rec.checkpoint_uri == f"{logdir}/ckpt-20"
    assert poller.poll().delivered == 0
    write(writer, 30, make(0.41))
    writer.close()
    assert poller.poll().delivered == 1 and sink.steps("job-1") == [10, 20, 30]


def test_missing_dir_or_tag_delivers_nothing(tmp_path: Path) -> None:
    logdir = tmp_path / "run-2"
    sink = RecordingSink()
    poller = make_poller("tensorboard", sink, logdirs={"j": logdir}, tag="eval/score")
    assert poller.poll().delivered == 0  # not created yet
    writer = EventFileWriter(str(logdir))
    write(writer, 5, simple("other", 1.0))
    writer.close()
    assert poller.poll().delivered == 0 and sink.calls == []


def test_new_event_file_after_restart_is_picked_up(tmp_path: Path) -> None:
    logdir = tmp_path / "run-3"
    first = EventFileWriter(str(logdir), filename_suffix=".a")
    write(first, 1, simple("acc", 0.5))
    first.close()
    sink = RecordingSink()
    poller = make_poller("tensorboard", sink, logdirs={"j": logdir}, tag="acc")
    assert poller.poll().delivered == 1
    second = EventFileWriter(str(logdir), filename_suffix=".b")  # the job resumed: a new file
    write(second, 2, simple("acc", 0.6))
    second.close()
    assert poller.poll().delivered == 1 and sink.steps("j") == [1, 2]
