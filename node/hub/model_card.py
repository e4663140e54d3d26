"""The model card of an uploaded run: what was trained, how, for how long, with whom, and how to load it.

The reward curve is drawn with Pillow (already installed with the app) rather than a plotting library: one line
chart does not justify matplotlib in the node.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from node.config import NodeConfig
from node.events import RoundFinished

if TYPE_CHECKING:
    from node.learning.checkpoint import CheckpointState

TAGS = ("rl-swarm", "grpo", "sapo", "reasoning-gym")
BUNDLED_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOOTHING = 10  # rounds in the moving average of the curve
PEER_CHOICES = {"uniform": "uniformly (SAPO)",
                "teaching": "teaching-first (widest reward spread, then our weakest families)"}


def base_model_id(model_ref: str) -> str | None:
    """The Hub id the run started from, when there is one (local folders and GGUF files have none)."""
    if model_ref == "bundled":
        return BUNDLED_BASE
    if model_ref.endswith(".gguf") or model_ref.startswith((".", "/", "~")) or model_ref.count("/") != 1:
        return None
    try:
        validate_repo_id(model_ref)
    except HFValidationError:
        return None
    return model_ref


def build_model_card(
    config: NodeConfig,
    state: CheckpointState,
    metrics: Sequence[RoundFinished],
    *,
    repo_id: str,
    peer_name: str,
    curve_file: str = "reward_curve.png",
) -> str:
    """Markdown with a YAML header (base model, tags, library) the Hub indexes."""
    train = config.training
    base = base_model_id(state.model)
    families = sorted(family for family, weight in config.tasks.weights.items() if weight > 0)
    swarm_size = max((m.peers_seen for m in metrics), default=0)
    header = ["---"]
    if base:
        header.append(f"base_model: {base}")
    header += ["library_name: transformers", "pipeline_tag: text-generation", "tags:"]
    header += [f"- {tag}" for tag in TAGS]
    header += ["---", ""]
    origin = f"[{base}](https://huggingface.co/{base})" if base else f"`{state.model}`"
    if state.model == "bundled":
        origin += " (the Q4_1 GGUF build bundled with RL Swarm Desktop, dequantized to float32 before training)"

    lines = [
        f"# {repo_id.split('/', 1)[1]}",
        "",
        f"{origin} post-trained with reinforcement learning in a decentralized swarm by the node **{peer_name}**, "
        "using RL Swarm Desktop and SAPO (Swarm sAmpling Policy Optimization, "
        "[arXiv:2509.08721](https://arxiv.org/abs/2509.08721)): every round the node answers its own questions, shares its answers "
        "with the swarm as text, takes some of its peers' answers, scores everything with its own verifier and "
        "does one GRPO update.",
        "",
        "## Training",
        "",
        "| setting | value |",
        "|---|---|",
        "| algorithm | SAPO (GRPO with rollout sharing) |",
        f"| base model | {origin} |",
        f"| rounds trained | {state.rounds_trained} (last swarm round {state.round}) |",
        f"| most peers seen in a round | {swarm_size} |",
        f"| local questions per round (I) | {train.local_questions} |",
        f"| peer groups per round (J) | {train.external_groups} |",
        f"| peer groups chosen | {PEER_CHOICES[train.peer_choice]} |",
        f"| completions per question (G) | {train.num_generations} |",
        f"| loss | {train.loss_type}, beta (KL) {train.beta:g}, clip epsilon {train.epsilon:g} / "
        f"{train.epsilon_high:g} |",
        f"| learning rate | {train.learning_rate:g} (AdamW), max grad norm {train.max_grad_norm:g} |",
        f"| sampling | temperature {train.temperature:g}, top-p {train.top_p:g}, "
        f"{train.max_new_tokens} new tokens at most |",
        f"| format reward weight | {train.format_reward_weight:g} |",
        f"| drop zero-advantage peer groups | {'yes' if train.drop_zero_advantage else 'no'} |",
        f"| task families (reasoning-gym) | {', '.join(families)} |",
        "",
        "## Reward",
        "",
    ]
    if metrics:
        lines += [
            f"![reward per round]({curve_file})",
            "",
            "Mean reward of the node's own completions per round (scored by its own reasoning-gym verifiers), "
            f"with a {SMOOTHING}-round moving average. "
            f"First {min(SMOOTHING, len(metrics))} rounds: {_mean(m.reward_local for m in metrics[:SMOOTHING]):.3f}; "
            f"last {min(SMOOTHING, len(metrics))}: {_mean(m.reward_local for m in metrics[-SMOOTHING:]):.3f}.",
            "",
        ]
    else:
        lines += ["No per-round metrics were recorded for this run.", ""]
    lines += [
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")',
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")',
        'messages = [{"role": "user", "content": "What is 17 * 23? Answer in <answer></answer> tags."}]',
        "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", "
        "return_dict=True)",
        "output = model.generate(**inputs, max_new_tokens=256)",
        'print(tokenizer.decode(output[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
        "```",
        "",
    ]
    return "\n".join(header + lines)


def reward_curve_png(metrics: Sequence[RoundFinished], *, width: int = 800, height: int = 400) -> bytes:
    """A line chart of reward per round (raw and moving average) as PNG bytes."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(14)
    left, right, top, bottom = 60, 20, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    draw.text((left, 12), "Reward per round (own completions)", fill="black", font=font)
    draw.rectangle((left, top, left + plot_w, top + plot_h), outline="black")
    rewards = [m.reward_local for m in metrics]
    rounds = [m.round for m in metrics]
    low, high = min([0.0, *rewards]), max([1.0, *rewards])
    for i in range(5):  # horizontal grid and y labels
        value = low + (high - low) * i / 4
        y = top + plot_h - plot_h * i / 4
        draw.line((left, y, left + plot_w, y), fill=(225, 225, 225))
        draw.text((8, y - 8), f"{value:.2f}", fill="black", font=font)
    if not rewards:
        draw.text((left + 20, top + plot_h // 2), "no rounds recorded", fill="gray", font=font)
        return _png(image)
    first, last = rounds[0], rounds[-1]
    span = max(last - first, 1)

    def point(round_: int, value: float) -> tuple[float, float]:
        return left + plot_w * (round_ - first) / span, top + plot_h - plot_h * (value - low) / (high - low)

    draw.text((left, top + plot_h + 8), f"round {first}", fill="black", font=font)
    label = f"round {last}"
    draw.text((left + plot_w - draw.textlength(label, font=font), top + plot_h + 8), label, fill="black", font=font)
    raw = [point(r, v) for r, v in zip(rounds, rewards, strict=True)]
    smooth = [point(r, v) for r, v in zip(rounds, _moving_average(rewards, SMOOTHING), strict=True)]
    if len(raw) == 1:
        x, y = raw[0]
        draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=(120, 160, 220))
    else:
        draw.line(raw, fill=(160, 190, 235), width=1)
        draw.line(smooth, fill=(20, 70, 170), width=3)
    draw.text((left + plot_w - 260, top + 6), f"blue: {SMOOTHING}-round moving average", fill=(20, 70, 170), font=font)
    return _png(image)


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
