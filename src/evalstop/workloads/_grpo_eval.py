"""The tokenizer and the eval callback of ``trl_runs`` (imports torch and transformers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, TrainerCallback

from .rl_toy import ToyRun

Scorer = Callable[[list[str]], np.ndarray]


def char_tokenizer(specials: Sequence[str], chars: str) -> PreTrainedTokenizerFast:
    """One token per character; ``specials`` are pad, eos and unk, in that order."""
    vocab = {tok: i for i, tok in enumerate([*specials, *chars])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[2]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token=specials[0], eos_token=specials[1], unk_token=specials[2],
        padding_side="left",
    )


class EvalRecorder(TrainerCallback):
    """At the given steps, sample the policy on the watched and gold prompts with its own
    generator and record the watched score, its items, the proxy and the true gold."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        eval_prompts: list[str],
        gold_prompts: list[str],
        gold_samples: int,
        length: int,
        seed: int,
        proxy_weights: np.ndarray,
        gold: Scorer,
        features: Scorer,
        steps: tuple[int, ...],
    ) -> None:
        self.tokenizer = tokenizer
        self.eval_ids = _ids(tokenizer, eval_prompts)
        reps = -(-gold_samples // len(gold_prompts))
        self.gold_ids = _ids(tokenizer, gold_prompts).repeat(reps, 1)[:gold_samples]
        self.length = length
        self.generator = torch.Generator().manual_seed(seed)
        self.proxy_weights = proxy_weights
        self.gold, self.features = gold, features
        self.steps = set(steps)
        self.start = 0.0
        self.record: dict[str, list[Any]] = {"steps": [], "scores": [], "items": [], "proxy": [], "gold": []}

    def calibrate(self, model: torch.nn.Module) -> None:
        """Measure the initial policy's gold (the 0 of the gold scale)."""
        self.start = float(self.gold(self._sample(model, self.gold_ids)).mean())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step in self.steps:
            self._evaluate(kwargs["model"], state.global_step)

    def _scale(self, values: np.ndarray) -> np.ndarray:
        return (values - self.start) / (1.0 - self.start)

    def _evaluate(self, model: torch.nn.Module, step: int) -> None:
        items = self._scale(self.gold(self._sample(model, self.eval_ids)))
        texts = self._sample(model, self.gold_ids)
        self.record["steps"].append(step)
        self.record["scores"].append(float(items.mean()))
        self.record["items"].append(items)
        self.record["proxy"].append(float((self.features(texts) @ self.proxy_weights).mean()))
        self.record["gold"].append(float(self._scale(self.gold(texts)).mean()))

    @torch.no_grad()
    def _sample(self, model: torch.nn.Module, prompt_ids: torch.Tensor) -> list[str]:
        was_training = model.training
        model.eval()
        ids = prompt_ids
        for _ in range(self.length):
            logits = model(input_ids=ids).logits[:, -1, :].float()
            probs = torch.softmax(logits, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=self.generator)], dim=1)
        model.train(was_training)
        completions = ids[:, prompt_ids.shape[1]:].tolist()
        return [self._text(row) for row in completions]

    def _text(self, row: list[int]) -> str:
        eos = self.tokenizer.eos_token_id
        kept = row[: row.index(eos)] if eos in row else row
        return str(self.tokenizer.decode(kept, skip_special_tokens=True))

    def run(self) -> ToyRun:
        r = self.record
        return ToyRun(
            steps=tuple(r["steps"]), scores=tuple(r["scores"]), items=np.array(r["items"], dtype=float),
            proxy=tuple(r["proxy"]), true_gold=tuple(r["gold"]),
        )


def _ids(tokenizer: PreTrainedTokenizerFast, prompts: list[str]) -> torch.Tensor:
    return torch.tensor([tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts])
