"""Do a rewind the EvalStop service asked for (remote mode of the HF/TRL callback).

The reply names the checkpoint (the URI the callback itself reported with the best eval: the
``checkpoint-<step>`` folder under ``output_dir``) and the correction. Before anything changes,
the checkpoint must be a saved one under the run's own ``output_dir`` (a reply never makes the
trainer load from elsewhere) and the correction must fit the trainer (``check_correction``).
"""

from __future__ import annotations

import os
from typing import Any

from ._service_rewind_order import RewindOrder
from ._trainer_rewind import RewindRefused, check_checkpoint, check_correction, rewind_in_place


def rewind_remote(
    order: RewindOrder, output_dir: str | None, objects: dict[str, Any], trainer: Any
) -> dict[str, Any]:
    """Load the order's checkpoint into the live model, optimizer and scheduler and apply its
    correction; return what was done. Raises RewindRefused (nothing changed) when it cannot."""
    checkpoint = check_checkpoint(output_dir, order.to_step)
    named = order.checkpoint_uri
    if named is not None and os.path.abspath(named) != os.path.abspath(checkpoint):
        raise RewindRefused(
            f"EvalStopCallback cannot rewind to {order.checkpoint_uri!r}: the service named a checkpoint "
            f"other than this run's own {checkpoint!r} for step {order.to_step}.")
    try:
        correction = order.parsed
    except ValueError as exc:
        raise RewindRefused(f"EvalStopCallback cannot rewind: {exc}") from None
    check_correction(correction, trainer)
    return rewind_in_place(checkpoint, correction, objects.get("model"), objects.get("optimizer"),
                           objects.get("lr_scheduler"), trainer)
