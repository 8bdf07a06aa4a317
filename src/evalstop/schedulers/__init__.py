"""Base scheduling policies and the EvalStop wrapper."""

from ._base import Action, JobView, KillPlan, Scheduler
from ._registry import SCHEDULERS, make_scheduler
from .evalstop import RLHF_ONLY, EvalStop
from .fairshare import FairShare
from .fifo import FIFO
from .gittins import Gittins, gittins_index
from .las import LAS
from .srtf import SRTFEst

__all__ = [
    "FIFO",
    "LAS",
    "RLHF_ONLY",

    "SCHEDULERS",
    "Action",
    "EvalStop",
    "FairShare",
    "Gittins",
    "JobView",
    "KillPlan",
    "SRTFEst",
    "Scheduler",
    "gittins_index",
    "make_scheduler",
]
