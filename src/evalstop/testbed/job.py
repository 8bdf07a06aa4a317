"""One testbed training job, run by the scheduler as its own process::

    python -m evalstop.testbed.job PLAN.json OUT_DIR --url URL --job-id-file FILE --token-file FILE

A policy-gradient run of :mod:`evalstop.workloads.rl_toy` (the same seed streams as
``run_toy``, so the curve is reproducible), or for kind ``sft`` a supervised fine-tuning run of
the same policy on demonstrations (:mod:`.sft`; its demonstrations come from the training
stream). At each eval it saves a checkpoint directory
(``OUT_DIR/ckpt/step-NNNNNN/theta.npy``), posts the watched eval score with that checkpoint's
URI to the EvalStop service (remote mode, :class:`~evalstop.integrations._remote.RemoteHistory`)
and appends one line to ``OUT_DIR/events.jsonl`` with the score, the service's answer and the
gold value (expected gold over every prompt: the evaluation the rule never sees).

The job does not stop itself on a "stop" answer: the stop is the scheduler's to deliver (the
service's Ray or Slurm adapter), and the job only records the answer. SIGTERM ends it cleanly
(exit 0).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    parser = argparse.ArgumentParser(prog="python -m evalstop.testbed.job")
    parser.add_argument("plan", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--url", required=True)
    ids = parser.add_mutually_exclusive_group(required=True)
    ids.add_argument("--job-id", help="the job's id at the service")
    ids.add_argument("--job-id-file", type=Path, help="a file holding it (written before the job starts)")
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.job_id_file is not None:
        args.job_id = args.job_id_file.read_text().strip()
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "events.jsonl", "a", encoding="utf-8") as log:
        signal.signal(signal.SIGTERM, _on_term(log))
        _event(log, {"event": "start", "t": started, "t_ready": time.time()})
        train(json.loads(args.plan.read_text()), args, log)
        _event(log, {"event": "end", "t": time.time()})
    return 0


def _on_term(log: IO[str]) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        if not log.closed:  # a SIGTERM after the last line (the interpreter's teardown) just exits
            _event(log, {"event": "sigterm", "t": time.time()})
        sys.exit(0)

    return handler


def _event(log: IO[str], row: dict[str, Any]) -> None:
    log.write(json.dumps(row) + "\n")
    log.flush()


@dataclass(frozen=True)
class EvalPoint:
    step: int
    theta: NDArray[np.float64]
    score: float  # the watched eval (noisy)
    gold: float  # the evaluation the rule never sees
    proxy: float


def training(plan: dict[str, Any], pace: Callable[[], None] = lambda: None) -> Iterator[EvalPoint]:
    """The job's training run without the service: one point per eval; ``pace()`` after each
    step (the job pads steps to ``step_time_s`` with it). Deterministic in ``plan["seed"]``."""
    from ..workloads.bank import BASE
    from ..workloads.rl_toy import (
        fit_proxy,
        make_env,
        policy,
        policy_gradient,
        record_eval,
        softmax,
        standardise,
    )
    from .sft import demonstrations, sft_gradient
    from .workload import KIND_CONFIG

    config = BASE.with_(**KIND_CONFIG[plan["kind"]], n_steps=plan["n_steps"], n_evals=plan["n_evals"])
    env_rng, proxy_rng, train_rng, eval_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(plan["seed"]).spawn(4)
    )
    env = make_env(config, env_rng)
    proxy = fit_proxy(config, env, proxy_rng)
    reward = proxy if config.target == "proxy" else standardise(env.gold, softmax(env.init_logits))
    demos = demonstrations(env, train_rng) if plan["kind"] == "sft" else None
    eval_at = set(np.linspace(0, config.n_steps, config.n_evals + 1).round().astype(int)[1:].tolist())
    theta = np.zeros(env.features.shape[-1])
    for step in range(1, config.n_steps + 1):
        if demos is None:
            theta += config.lr * policy_gradient(config, theta, reward, env, train_rng)
        else:
            theta += config.lr * sft_gradient(theta, env, demos, train_rng)
        pace()
        if step in eval_at:
            record: dict[str, list[Any]] = {"steps": [], "scores": [], "items": [], "proxy": [], "gold": []}
            record_eval(record, step, policy(env, theta), env, proxy, eval_rng, config.eval_samples)
            yield EvalPoint(step, theta.copy(), record["scores"][0], record["gold"][0], record["proxy"][0])


def train(plan: dict[str, Any], args: argparse.Namespace, log: IO[str]) -> None:
    from ..detectors import Eval
    from ..integrations._remote import RemoteHistory, RemoteJob

    ckpt_root = args.out / "ckpt"
    remote = RemoteJob(args.url, args.job_id, token=args.token_file.read_text().strip())
    history = RemoteHistory(
        remote, metric="eval_score", checkpoint_uri=lambda s: str(ckpt_root / f"step-{s:06d}")
    )

    def report(step: int, score: float, gold: float, proxy: float, save: Callable[[Path], None]) -> None:
        ckpt = ckpt_root / f"step-{step:06d}"
        ckpt.mkdir(parents=True, exist_ok=True)
        save(ckpt)
        verdict = history.add(Eval(step=step, score=score, progress=step / plan["n_steps"]))
        _event(
            log,
            {
                "event": "eval",
                "t": time.time(),
                "step": step,
                "score": score,
                "gold": gold,
                "proxy": proxy,
                "checkpoint": str(ckpt),
                "decision": None if verdict is None else verdict.decision.value,
                "best_step": None if verdict is None else verdict.best_step,
            },
        )

    if plan["kind"].startswith("grpo"):
        from .grpo import grpo_training

        grpo_training(plan, report)
        return
    next_at = time.monotonic()

    def pace() -> None:
        nonlocal next_at
        next_at += plan["step_time_s"]
        time.sleep(max(0.0, next_at - time.monotonic()))

    for point in training(plan, pace):
        report(point.step, point.score, point.gold, point.proxy, partial(_save_theta, point.theta))


def _save_theta(theta: NDArray[np.float64], ckpt: Path) -> None:
    np.save(ckpt / "theta.npy", theta)


if __name__ == "__main__":
    sys.exit(main())
