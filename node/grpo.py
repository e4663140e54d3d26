"""Policy sampling and one long-lived TRL ``GRPOTrainer`` stepped once per swarm round.

The SAPO round loop owns generation, sharing and scoring; TRL owns the GRPO objective (advantages, clipping, KL,
loss types) and the optimizer. The seam between them is :class:`RoundAdapter`, TRL's ``rollout_func``: the round's
groups, local and external, are handed to the trainer already tokenized and scored, so TRL generates nothing and
the verifier runs exactly once per completion.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import StoppingCriteria, StoppingCriteriaList

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

log = logging.getLogger(__name__)

# The trainer is stepped by hand, one optimizer step per round, so no schedule length is needed; a constant
# learning rate keeps a swarm's late joiners and early members on the same footing.
_SCHEDULE_STEPS = 10**9


@dataclass(frozen=True)
class Completion:
    ids: tuple[int, ...]  # without the end-of-sequence token
    text: str
    finished: bool  # ended with end-of-sequence (False: cut at max_new_tokens)


@dataclass(frozen=True)
class TrainGroup:
    """One question and its G scored completions, ready for the update."""

    prompt_ids: tuple[int, ...]
    completions: tuple[Completion, ...]
    rewards: tuple[float, ...]


@dataclass(frozen=True)
class StepStats:
    loss: float
    kl: float | None
    completion_length: float
    seconds: float
    grad_norm: float | None = None  # before clipping
    entropy: float | None = None  # mean per-token entropy of the policy on the trained completions


class Policy:
    """The model being trained plus an optional low-precision copy used only for sampling."""

    def __init__(self, model, tokenizer, *, generation_dtype: torch.dtype, max_prompt_tokens: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.eos_ids = _eos_ids(model, tokenizer)
        self._sampler = model if generation_dtype == model.dtype else copy.deepcopy(model).to(generation_dtype)
        self._sampler.eval()

    def prompt_ids(self, messages: list[dict[str, str]]) -> tuple[int, ...]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return tuple(int(i) for i in ids[-self.max_prompt_tokens :])

    def encode_completion(self, text: str, *, finished: bool, max_new_tokens: int) -> Completion:
        """Tokenize a peer's completion text for our model (peers may use another tokenizer)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:max_new_tokens]
        truncated = len(ids) == max_new_tokens and not finished
        return Completion(ids=tuple(ids), text=text, finished=finished and not truncated)

    @torch.inference_mode()
    def generate(
        self, prompts: list[tuple[int, ...]], *, num_generations: int, max_new_tokens: int, temperature: float,
        top_p: float, seed: int, should_stop: Callable[[], bool] = lambda: False, greedy: bool = False,
    ) -> list[list[Completion]]:
        """All G completions of all prompts in one batched, left-padded ``generate`` call.

        ``should_stop`` is polled after every token, so a cancelled node does not sit out a long generation.
        ``greedy`` decodes the most likely token instead of sampling (held-out evaluation's pass@1).
        """
        device = next(self._sampler.parameters()).device
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        torch.manual_seed(seed)
        output = self._sampler.generate(
            input_ids=input_ids,
            attention_mask=attention,
            **({"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}),
            max_new_tokens=max_new_tokens,
            num_return_sequences=num_generations,
            pad_token_id=pad,
            eos_token_id=list(self.eos_ids),
            stopping_criteria=StoppingCriteriaList([_Cancelled(should_stop)]),
        )
        rows = output[:, width:].tolist()
        groups = []
        for start in range(0, len(rows), num_generations):
            groups.append([self._completion(row) for row in rows[start : start + num_generations]])
        return groups

    def _completion(self, row: list[int]) -> Completion:
        end = next((i for i, token in enumerate(row) if token in self.eos_ids), None)
        ids = row if end is None else row[:end]
        return Completion(ids=tuple(ids), text=self.tokenizer.decode(ids, skip_special_tokens=True), finished=end is not None)

    def sync_sampler(self) -> None:
        if self._sampler is self.model:
            return
        with torch.no_grad():
            for target, source in zip(self._sampler.parameters(), self.model.parameters(), strict=True):
                target.copy_(source)


class _Cancelled(StoppingCriteria):
    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.should_stop(), dtype=torch.bool, device=input_ids.device)


class RoundAdapter:
    """TRL ``rollout_func`` + reward function that replay the round's prepared groups.

    TRL passes each prompt G times in a row; the adapter checks that they are the prompts it was loaded with, in
    order, and returns the stored token ids. The rewards reach TRL's reward function as an extra field.
    """

    __name__ = "round_rewards"  # TRL logs reward functions by name; the rewards were computed before the step

    def __init__(self, eos_id: int) -> None:
        self._eos_id = eos_id
        self._rows: list[tuple[str, tuple[int, ...], Completion, float]] = []

    def load(self, groups: list[TrainGroup]) -> list[dict[str, str]]:
        self._rows = [
            (f"sapo-{g}-{c}", group.prompt_ids, completion, reward)
            for g, group in enumerate(groups)
            for c, (completion, reward) in enumerate(zip(group.completions, group.rewards, strict=True))
        ]
        # TRL treats each row's "prompt" as opaque text here; the key ties a row back to its group.
        return [{"prompt": key} for key, *_ in self._rows]

    def rollout(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list]:
        keys = [key for key, *_ in self._rows]
        if list(prompts) != keys:
            raise RuntimeError("TRL reordered the round's rollouts; the adapter cannot match them to their groups")
        return {
            "prompt_ids": [list(prompt) for _, prompt, _, _ in self._rows],
            # A finished completion keeps its end-of-sequence token so the model learns where to stop.
            "completion_ids": [list(c.ids) + ([self._eos_id] if c.finished else []) for _, _, c, _ in self._rows],
            "logprobs": None,
            "sapo_reward": [reward for *_, reward in self._rows],
        }

    def __call__(self, prompts, completions, sapo_reward, **kwargs) -> list[float]:
        return list(sapo_reward)


class GrpoLearner:
    """A GRPOTrainer built once and advanced by exactly one optimizer step per call of :meth:`step`."""

    def __init__(
        self, policy: Policy, *, output_dir: Path, device: str, mixed_bf16: bool, num_generations: int,
        max_new_tokens: int, learning_rate: float, beta: float, epsilon: float, epsilon_high: float, loss_type: str,
        max_grad_norm: float, seed: int, micro_batch_groups: int = 0,
    ) -> None:
        self.policy = policy
        self.micro_batch_groups = micro_batch_groups
        self.adapter = RoundAdapter(eos_id=policy.eos_ids[0])
        args = GRPOConfig(
            output_dir=str(output_dir),
            report_to=[],
            use_cpu=device == "cpu",
            bf16=mixed_bf16,
            per_device_train_batch_size=num_generations,
            num_generations=num_generations,
            steps_per_generation=1,
            gradient_accumulation_steps=1,
            num_iterations=1,
            max_completion_length=max_new_tokens,
            learning_rate=learning_rate,
            lr_scheduler_type="constant",
            max_grad_norm=max_grad_norm,
            beta=beta,
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            loss_type=loss_type,
            optim="adamw_torch",
            disable_dropout=True,
            save_strategy="no",
            logging_steps=1,
            seed=seed,
        )
        self.trainer = GRPOTrainer(
            model=policy.model,
            reward_funcs=[self.adapter],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["unused: rounds are fed by the adapter"]}),
            processing_class=policy.tokenizer,
            rollout_func=self.adapter.rollout,
        )
        self.trainer.create_optimizer_and_scheduler(num_training_steps=_SCHEDULE_STEPS)
        # Trainer.train() would set this; step() sets it per forward/backward pass.
        self.trainer.current_gradient_accumulation_steps = 1
        self.num_generations = num_generations

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer

    @property
    def global_step(self) -> int:
        return self.trainer.state.global_step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.trainer.state.global_step = value

    def step(self, groups: list[TrainGroup]) -> StepStats:
        started = time.perf_counter()
        if any(len(g.completions) != self.num_generations for g in groups):
            raise ValueError(f"every group needs exactly {self.num_generations} completions")
        trainer = self.trainer
        trainer._metrics["train"].clear()
        trainer.model.train()
        size = self.micro_batch_groups or len(groups)
        loss = 0.0
        for start in range(0, len(groups), size):
            chunk = groups[start : start + size]
            # GRPO divides each pass's loss by this; weighting a pass by its share of the round's groups makes
            # the accumulated gradient exactly the whole-batch one for grpo / dr_grpo (advantages are per
            # group either way); bnpo / dapo token means become per-pass means, as in TRL's own accumulation.
            trainer.current_gradient_accumulation_steps = len(groups) / len(chunk)
            loss += float(trainer.training_step(trainer.model, self.adapter.load(chunk), None).item())
        norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.args.max_grad_norm or math.inf)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.state.global_step += 1
        self.policy.sync_sampler()
        metrics = trainer._metrics["train"]
        kl = _mean(metrics.get("kl")) if trainer.beta else None
        return StepStats(
            loss=loss,
            kl=kl,
            completion_length=_mean(metrics.get("completions/mean_length")) or 0.0,
            seconds=time.perf_counter() - started,
            grad_norm=float(norm) if math.isfinite(float(norm)) else None,
            entropy=_mean(metrics.get("entropy")),
        )


def _mean(values) -> float | None:
    values = [v for v in (values or []) if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def _eos_ids(model, tokenizer) -> tuple[int, ...]:
    ids = []
    config_eos = getattr(model.generation_config, "eos_token_id", None)
    for candidate in ([config_eos] if isinstance(config_eos, int) else list(config_eos or [])) + [tokenizer.eos_token_id]:
        if candidate is not None and candidate not in ids:
            ids.append(int(candidate))
    if not ids:
        raise ValueError("the tokenizer has no end-of-sequence token")
    return tuple(ids)
