"""Named policies: a base scheduler, optionally wrapped by EvalStop with a stopping rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..detectors import DEFAULT_SPEC, parse_spec
from ..schedulers import EvalStop, Scheduler, make_scheduler
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
    watch: tuple[str, ...] | None = ("rlhf",)
    oracle: bool = False
    cadence: str | None = None

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
