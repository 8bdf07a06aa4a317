"""W&B transaction logs (``run-<id>.wandb``, written by online and offline runs alike), read
incrementally by byte offset; the records are decoded with the ``wandb`` package's own message
classes (``wandb.proto.wandb_internal_pb2.Record``), which need no network and no login.

The framing is LevelDB's log format with a header of W&B's own: 7 bytes (``:W&B``, uint16
``0xBEE1``, uint8 version 0), then 32 KiB blocks (the header counts in the first). A block holds
chunks ``uint32 CRC-32 of type byte + data, uint16 length, uint8 type, data``; type 1 is a whole
record, 2/3/4 the first/middle/last piece of one that crosses blocks; a block tail shorter than a
chunk header is zero padding. wandb 0.31 has no Python reader of this framing (its Go core reads
it), so it is parsed here. The core writes the file every ``x_transaction_log_flush_interval``
seconds (15 by default; ``WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL=1`` for a quicker watcher), and
a step's history row once the next step begins or the run finishes.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import struct
import zlib
from pathlib import Path
from typing import Any, TypeGuard

from ._record import PathReader, ScoreRecord, read_from

log = logging.getLogger("evalstop.logs.wandb")
FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
_CHUNK = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RUN_TIME = re.compile(r"run-(\d{8}_\d{6})-")


class Corrupt(ValueError):
    """A chunk fails its CRC: ``records`` are the whole ones before it."""

    def __init__(self, message: str, records: list[bytes]) -> None:
        super().__init__(message)
        self.records = records


def split_records(buf: bytes, start: int) -> tuple[list[bytes], int]:
    """The complete records in ``buf`` (the file's bytes from offset ``start``, a record boundary
    after the file header) and how many bytes they use; a record still being written waits.
    ``Corrupt`` for a chunk that fails its CRC."""
    out: list[bytes] = []
    pos = used = 0
    pieces: list[bytes] = []
    while True:
        left = BLOCK - (start + pos) % BLOCK
        if left < _CHUNK.size:  # zero padding to the block's end
            if pos + left > len(buf):
                return out, used
            pos += left
            used = used if pieces else pos
            continue
        if pos + _CHUNK.size > len(buf):
            return out, used
        crc, length, kind = _CHUNK.unpack_from(buf, pos)
        data = buf[pos + _CHUNK.size: pos + _CHUNK.size + length]
        if len(data) < length:
            return out, used
        pos += _CHUNK.size + length
        if crc != zlib.crc32(data, zlib.crc32(bytes([kind]))):
            raise Corrupt(f"a chunk at byte {start + pos - length - _CHUNK.size} fails its CRC", out)
        pieces.append(data)
        if kind in (FULL, LAST):
            out.append(b"".join(pieces))
            pieces, used = [], pos


class WandbReader(PathReader):
    """``metric`` from the history rows of W&B runs. ``path``: a ``run-<id>.wandb`` file, a run
    directory, or a directory of them (``wandb/``): every run there is read, in the order the runs
    started (the time in ``[offline-]run-<YYYYmmdd_HHMMSS>-<id>``), as a TensorBoard log directory
    is. The step is the row's ``step_key`` (``_step``: the run's own step; the HF Trainer logs
    ``train/global_step``); a nested key is joined with dots, as W&B shows it."""

    def __init__(self, path: str | Path, metric: str, *, step_key: str = "_step") -> None:
        super().__init__(path, metric)
        self.step_key = step_key
        self._offsets: dict[Path, int] = {}
        self._bad: set[Path] = set()
        self._record: Any = None

    def files(self) -> list[Path]:
        """The transaction logs under ``path`` now, in the order their runs started."""
        if self.path.is_file():
            return [self.path]
        found = [p for p in self.path.rglob("*.wandb") if p.is_file() and "latest-run" not in p.parts]
        return sorted(found, key=lambda p: (_started(p), str(p)))

    def read(self) -> list[ScoreRecord]:
        out: list[ScoreRecord] = []
        for path in self.files():
            if path not in self._bad:
                out.extend(self._read_file(path))
        return out

    def _read_file(self, path: Path) -> list[ScoreRecord]:
        offset = self._offsets.get(path, 0)
        if offset == 0:
            head = read_from(path, 0)[: len(FILE_HEADER)]
            if len(head) < len(FILE_HEADER):
                return []
            if head != FILE_HEADER:
                log.warning("%s: not a W&B transaction log of version 0 (header %r); skipped", path, head)
                self._bad.add(path)
                return []
            offset = len(FILE_HEADER)
        try:
            records, used = split_records(read_from(path, offset), offset)
        except Corrupt as exc:
            log.warning("%s: %s; the rest of the file is skipped", path, exc)
            self._bad.add(path)
            records, used = exc.records, 0
        self._offsets[path] = offset + used
        out = []
        for data in records:
            row = self._history(data)
            if row is not None:
                out.extend(self._score(row))
        return out

    def _history(self, data: bytes) -> dict[str, Any] | None:
        record = self._message_class()()
        try:
            record.ParseFromString(data)
        except Exception as exc:  # protobuf's DecodeError has no stable import path
            log.warning("%s: a record that does not parse was skipped: %s", self.path, exc)
            return None
        if record.WhichOneof("record_type") != "history":
            return None
        return {(item.key or ".".join(item.nested_key)): _value(item) for item in record.history.item}

    def _score(self, row: dict[str, Any]) -> list[ScoreRecord]:
        self._names.update(k for k, v in row.items() if _number(v) and not k.startswith("_")
                           and k != self.step_key)
        value, step, ts = row.get(self.metric), row.get(self.step_key), row.get("_timestamp")
        if not _number(value) or not _number(step) or not float(step).is_integer():
            return []
        return [ScoreRecord(int(step), float(value), self.metric, None, float(ts) if _number(ts) else None)]

    def _message_class(self) -> Any:
        if self._record is None:
            try:
                pb2 = importlib.import_module("wandb.proto.wandb_internal_pb2")
            except ImportError as exc:
                raise ImportError("reading W&B run files needs wandb: "
                                  "pip install -e '.[watch-wandb]'") from exc
            self._record = pb2.Record
        return self._record


def _started(path: Path) -> str:
    match = RUN_TIME.search(path.parent.name)
    return match.group(1) if match else ""


def _value(item: Any) -> Any:
    """The typed value when the SDK wrote one (``x_history_value_encoding=json,typed``), else the
    JSON one (W&B writes NaN and Infinity as JSON's non-standard literals, which json reads)."""
    kind = item.WhichOneof("value")
    if kind is not None:
        return getattr(item, kind) if kind != "none" else None
    try:
        return json.loads(item.value_json) if item.value_json else None
    except ValueError:
        return None


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
