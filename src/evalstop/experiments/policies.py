"""Named policies: a base scheduler, optionally wrapped by EvalStop with a stopping rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..detectors import DEFAULT_SPEC, parse_spec
from ..schedulers import RLHF_ONLY, EvalStop, Scheduler, make_scheduler
from ..sim.cluster import SimConfig

#: The paper preset's reading of "k consecutive declines" (docs/model.md says why).
PAPER_DETECTOR = "evalstop:k=2,against=best"


@dataclass(frozen=True)
class PolicySpec:
    """``label`` names the row in tables; ``detector`` is a detector spec, ``"default"`` (the
    library's ``DEFAULT_SPEC``, whatever it is) or None (no rule);
    ``watch`` the job kinds the rule applies to (None = all); ``oracle`` stops each hacking job
    at its true best checkpoint (simulator only: it reads the hidden labels); ``cadence`` the
    eval cadence policy of the watched jobs (``every:3``, ``adaptive:every=3,dense=1``; None:
    every eval, ``every:1``)."""

    label: str
    base: str = "srtf"
    base_params: Mapping[str, Any] = field(default_factory=dict)
    detector: str | None = None
    watch: tuple[str, ...] | None = RLHF_ONLY
    oracle: bool = False
    cadence: str | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PolicySpec:
        """The policy of a ``[[policy]]`` table (a study's or ``evalstop simulate``'s config): a key
        the table leaves out takes the field's default, the label the base's name. ValueError
        for a ``watch`` that is neither "all" nor a list of job kinds."""
        base = str(doc.get("base", cls.base))
        return cls(
            label=str(doc.get("label", base)),
            base=base,
            base_params=dict(doc.get("base_params", {})),
            detector=doc.get("detector"),
            watch=parse_watch(doc["watch"]) if "watch" in doc else cls.watch,
            oracle=bool(doc.get("oracle", False)),
            cadence=doc.get("cadence"),
        )


    def build(self, sim: SimConfig | None = None) -> tuple[Scheduler, SimConfig]:
        base = make_scheduler(self.base, **dict(self.base_params))
        scheduler: Scheduler = base
        if self.detector is not None:
            spec = DEFAULT_SPEC if self.detector == "default" else self.detector
            scheduler = EvalStop(base, parse_spec(spec), watch=self.watch, cadence=self.cadence)
        elif self.cadence is not None:
            raise ValueError(f"The 'cadence' parameter of policy {self.label!r} needs a 'detector' "
                             f"(a cadence asks the rule's monitor when to evaluate). Got {self.cadence!r}.")
        config = sim or SimConfig()
        if self.oracle:
            config = replace(config, oracle=True)
        return scheduler, config


def parse_watch(value: Any) -> tuple[str, ...] | None:
    """A policy's ``watch``: "all" (or None) -> None, a list of job kinds -> a tuple of them."""
    if value == "all" or value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'watch' must be \"all\" or a list of job kinds. Got {value!r} instead.")
    return tuple(value)
