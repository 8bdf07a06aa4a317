"""One way to declare and check the tables of evalstop's TOML configs, and to emit JSON Schema.

The simulate config (``evalstop simulate``), the study specs (``experiments/specs/*.toml``) and
the pull config (``evalstop serve --pull-config``) declare each of their tables once, as a
:class:`Table` of :class:`Key`s; the same declaration checks a parsed document (unknown keys are
listed together with the valid ones, a value of the wrong type names its key) and produces the
JSON Schema in ``docs/schema/`` (``python -m evalstop.experiments.config_schema docs/schema``).
Checks of meaning (ranges, names of rules and schedulers) stay with the objects that own them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Key", "Table", "describe"]

#: JSON type name -> the Python types a TOML value of that type has (bool is not a number).
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,),
    "array": (list, tuple), "object": (dict,),
}


@dataclass(frozen=True)
class Key:
    """One key of a table. ``types``: JSON type names it may have; ``items``: the item type of an
    array; ``length``: an array's exact length; ``enum``: the allowed values (of a string or of
    an array's items)."""

    name: str
    types: tuple[str, ...]
    description: str = ""
    items: str | None = None
    length: int | None = None
    enum: tuple[Any, ...] | None = None
    required: bool = False
    table: Table | None = None  # the nested table of an object (or array of tables)

    def check(self, value: Any, where: str) -> str | None:
        """None if ``value`` fits, else the message (naming ``where``, the key and the value)."""
        kind = next((t for t in self.types if _is(value, t)), None)
        if kind is None:
            return f"{where}: {self.name!r} must be {self._expected()}. Got {value!r} instead."
        if kind == "array":
            if self.length is not None and len(value) != self.length:
                return (f"{where}: {self.name!r} must be {self._expected()}. Got {list(value)!r} "
                        f"({len(value)} item(s)) instead.")
            bad = [v for v in value if self.items is not None and not _is(v, self.items)]
            bad += [v for v in value if self.enum is not None and v not in self.enum]
            if bad:
                return f"{where}: {self.name!r} must be {self._expected()}. Got {bad[0]!r} in it."
        elif self.enum is not None and value not in self.enum:
            return f"{where}: {self.name!r} must be one of {list(self.enum)}. Got {value!r} instead."
        return None

    def _expected(self) -> str:
        parts = []
        for t in self.types:
            if t == "array":
                n = f"{self.length} " if self.length is not None else ""
                item = f" of {self.items}s" if self.items else ""
                of = f" from {list(self.enum)}" if self.enum else ""
                parts.append(f"a list{item}{of}" if not n else f"a list of {n}{self.items or 'item'}s")
            elif t == "string" and self.enum:
                parts.append(f"one of {list(self.enum)}")
            else:
                parts.append({"integer": "an integer", "number": "a number", "string": "a string",
                              "boolean": "true or false", "object": "a table"}[t])
        return " or ".join(parts)

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.description:
            out["description"] = self.description
        alts = []
        for t in self.types:
            if t == "object" and self.table is not None:
                alts.append(self.table.json_schema())
            elif t == "array":
                arr: dict[str, Any] = {"type": "array"}
                if self.table is not None:
                    arr["items"] = self.table.json_schema()
                elif self.items is not None or self.enum is not None:
                    arr["items"] = {k: v for k, v in (("type", self.items),
                                                       ("enum", list(self.enum or []) or None)) if v}
                if self.length is not None:
                    arr["minItems"] = arr["maxItems"] = self.length
                alts.append(arr)
            elif t == "string" and self.enum is not None:
                alts.append({"type": "string", "enum": list(self.enum)})
            else:
                alts.append({"type": t})
        if len(alts) == 1:
            out.update(alts[0])
        else:
            out["anyOf"] = alts
        return out


@dataclass(frozen=True)
class Table:
    """A TOML table: its keys, how messages name it, and whether other keys pass through
    (``open``: the rest is checked by whatever receives them)."""

    title: str
    keys: tuple[Key, ...]
    description: str = ""
    open: bool = False
    by_name: dict[str, Key] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {k.name: k for k in self.keys})

    def names(self) -> list[str]:
        return [k.name for k in self.keys]

    def check(self, doc: Any, error: type[Exception], where: str | None = None) -> None:
        """Raise ``error`` naming the table (``where``, default its title) and the key."""
        where = where or self.title
        if not isinstance(doc, Mapping):
            raise error(f"{where} must be a table. Got {doc!r} instead.")
        unknown = sorted(k for k in doc if k not in self.by_name)
        if unknown and not self.open:
            raise error(f"unknown key(s) {unknown} in {where}; valid keys: {sorted(self.by_name)}")
        for key in self.keys:
            if key.name not in doc:
                if key.required:
                    raise error(f"{where}: missing required key {key.name!r} ({key.description})")
                continue
            value = doc[key.name]
            problem = key.check(value, where)
            if problem is not None:
                raise error(problem)
            if key.table is not None and isinstance(value, Mapping):
                key.table.check(value, error)
            elif key.table is not None:
                for i, item in enumerate(value):
                    key.table.check(item, error, f"{key.table.title} #{i + 1}")

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "title": self.title}
        if self.description:
            out["description"] = self.description
        out["properties"] = {k.name: k.json_schema() for k in self.keys}
        required = [k.name for k in self.keys if k.required]
        if required:
            out["required"] = required
        out["additionalProperties"] = self.open
        return out


def describe(table: Table, schema_id: str) -> dict[str, Any]:
    """The JSON Schema document of a top-level table."""
    head = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id}
    return {**head, **table.json_schema()}


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    return isinstance(value, _PY_TYPES[kind])


def unique(values: Sequence[Any]) -> list[Any]:
    """The values that occur more than once, in order of their second occurrence."""
    seen: set[Any] = set()
    dupes = []
    for v in values:
        if v in seen and v not in dupes:
            dupes.append(v)
        seen.add(v)
    return dupes
