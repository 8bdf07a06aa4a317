"""TFRecord framing and the scalars of TensorBoard ``Event`` protobufs, parsed without TensorFlow,
TensorBoard or protobuf.

A TFRecord is ``uint64 length, uint32 masked CRC of length, data, uint32 masked CRC of data``
(little-endian). ``split_records`` returns the complete records of a byte buffer and how many
bytes they took, so a reader keeps its byte offset and never re-reads; a record still being
written is left for the next read. CRCs are not checked (a torn record is caught by its length;
a record whose protobuf does not parse is skipped).

Scalars come in two forms: ``Summary.Value.simple_value`` (PyTorch ``SummaryWriter``,
tensorboardX, TF1) and a one-element ``TensorProto`` (TF2 ``tf.summary.scalar``). Field numbers
are those of ``tensorboard/compat/proto/event.proto``, ``summary.proto`` and ``tensor.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

_HEADER = struct.Struct("<Q")
_FLOAT, _DOUBLE = struct.Struct("<f"), struct.Struct("<d")
#: TensorProto dtype -> (struct format of one element in tensor_content, its repeated field)
_DTYPES: dict[int, tuple[str, int]] = {1: ("<f", 5), 2: ("<d", 6), 3: ("<i", 7), 9: ("<q", 10)}


def split_records(buf: bytes) -> tuple[list[bytes], int]:
    """The complete records at the start of ``buf`` and the bytes they use."""
    out, pos, size = [], 0, len(buf)
    while pos + 12 <= size:
        (length,) = _HEADER.unpack_from(buf, pos)
        end = pos + 12 + length + 4
        if end > size:
            break
        out.append(buf[pos + 12: pos + 12 + length])
        pos = end
    return out, pos


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes, i: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field, wire type, value or start, end)``: a varint's or fixed field's value in the third
    slot, a length-delimited field's bytes as ``buf[start:end]``."""
    while i < end:
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield field, 0, value, i
        elif wire == 2:
            length, i = _varint(buf, i)
            yield field, 2, i, i + length
            i += length
        elif wire == 1:
            yield field, 1, i, i + 8
            i += 8
        elif wire == 5:
            yield field, 5, i, i + 4
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _tensor_scalar(buf: bytes, start: int, end: int) -> float | None:
    """The value of a one-element numeric TensorProto, else None."""
    dtype, content, repeated = 0, b"", []
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 0:
            dtype = a
        elif field == 4 and wire == 2:
            content = buf[a:b]
        elif field in (5, 6, 7, 10) and wire in (1, 2, 5, 0):
            repeated.append((field, wire, a, b))
    kind = _DTYPES.get(dtype)
    if kind is None:
        return None
    fmt, wanted = kind
    if content:
        size = struct.calcsize(fmt)
        return float(struct.unpack_from(fmt, content)[0]) if len(content) == size else None
    values = [_repeated_value(buf, wanted, fmt, r) for r in repeated if r[0] == wanted]
    return values[0] if len(values) == 1 and values[0] is not None else None


def _repeated_value(buf: bytes, field: int, fmt: str, item: tuple[int, int, int, int]) -> float | None:
    _, wire, a, b = item
    if wire == 0:  # one unpacked varint
        return float(a)
    if field in (7, 10):  # packed varints: exactly one
        value, i = _varint(buf, a)
        return float(value) if i == b else None
    size = struct.calcsize(fmt)
    return float(struct.unpack_from(fmt, buf, a)[0]) if b - a == size else None


def event_scalars(data: bytes) -> Iterator[tuple[str, int, float, float]]:
    """``(tag, step, value, wall_time)`` for every scalar in one serialized ``Event``."""
    wall_time, step, summary = 0.0, 0, None
    for field, wire, a, b in _fields(data, 0, len(data)):
        if field == 1 and wire == 1:
            (wall_time,) = _DOUBLE.unpack_from(data, a)
        elif field == 2 and wire == 0:
            step = a - (1 << 64) if a >= 1 << 63 else a
        elif field == 5 and wire == 2:
            summary = (a, b)
    if summary is None:
        return
    for field, wire, a, b in _fields(data, *summary):
        if field == 1 and wire == 2:
            scalar = _value_scalar(data, a, b)
            if scalar is not None:
                yield scalar[0], step, scalar[1], wall_time


def _value_scalar(buf: bytes, start: int, end: int) -> tuple[str, float] | None:
    tag, value = None, None
    for field, wire, a, b in _fields(buf, start, end):
        if field == 1 and wire == 2:
            tag = buf[a:b].decode("utf-8", "replace")
        elif field == 2 and wire == 5:
            (value,) = _FLOAT.unpack_from(buf, a)
        elif field == 8 and wire == 2:
            value = _tensor_scalar(buf, a, b)
    return None if tag is None or value is None else (tag, value)
