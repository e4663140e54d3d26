"""The torch-free seam between the desktop app and the node: the types the app reads, their JSON codecs, and the
ids and constants both sides name.

The app never imports the training stack (torch, transformers, hivemind): it asks the node CLI in a child process
(``rl-swarm-node hardware --json``) and decodes the answer into these types, and it runs the node itself through
:mod:`node.process_client` and reads :mod:`node.events`. What ``app/`` may import from ``node/`` is fixed by an
import-linter contract in ``pyproject.toml``: this module, ``config``, ``errors``, ``events``, ``invite``,
``launch``, ``process_client``, ``platform_support`` and the other torch-free helpers named there.

Account page (wallet, chain, rewards): one way, a read-only torch-free helper. The page calls
:func:`node.chain.account.account_summary` in a worker thread (web3 over JSON-RPC for the chain's view, the run's
submission queue for this node's recent transactions; it sends no transaction), so it works the same whether or not
a node is running. The running node reports live changes as ``ChainStatus`` / ``ChainTransaction`` events, which the
dashboard shows; the page never opens a second way in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import psutil

from node.errors import NodeError

# The model id of SmolLM2-135M-Instruct shipped with the app (see node.learning.models).
BUNDLED = "bundled"
# The Hub models of the catalog (node.learning.models.CATALOG holds their sizes and descriptions).
QWEN2_5_1_5B = "Qwen/Qwen2.5-1.5B-Instruct"
QWEN3_0_6B = "Qwen/Qwen3-0.6B"
QWEN2_5_0_5B = "Qwen/Qwen2.5-0.5B-Instruct"
SMOLLM2_360M = "HuggingFaceTB/SmolLM2-360M-Instruct"
SMOLLM2_135M = "HuggingFaceTB/SmolLM2-135M-Instruct"
CATALOG_IDS: tuple[str, ...] = (QWEN2_5_1_5B, QWEN3_0_6B, QWEN2_5_0_5B, SMOLLM2_360M, BUNDLED, SMOLLM2_135M)

FitLabel = Literal["fits", "tight", "won't fit"]
# The adapter rank the fit figures assume and the wizard's "LoRA adapter" choice sets (training.lora_rank).
LORA_RANK = 16


@dataclass(frozen=True)
class Recommendation:
    """What the node advises this machine to train, and how (``rl-swarm-node hardware``)."""

    model: str  # one of CATALOG_IDS
    device: str  # "cuda" | "mps" | "cpu"
    train_dtype: str  # "float32" | "bfloat16"
    generation_dtype: str
    num_generations: int  # G: completions per question
    local_questions: int  # I: questions this node samples per round
    external_groups: int  # J: groups taken from peers per round
    max_new_tokens: int
    micro_batch_groups: int  # groups per forward/backward pass, 0 = the whole round
    threads: int  # torch CPU threads
    reason: str  # shown to the user


@dataclass(frozen=True)
class ModelFit:
    """How a catalog model would fit this machine with the recommended round shape (for the model picker)."""

    id: str
    name: str
    description: str
    download_bytes: int
    required_bytes: int  # full fine-tuning
    label: FitLabel
    required_bytes_lora: int = 0  # a LoRA adapter of rank LORA_RANK
    label_lora: FitLabel = "won't fit"
    # The full fine-tune estimate is linear in the tokens of one pass above a floor, so a torch-free caller (the app's
    # Settings) can redo it for any round shape: max(floor_bytes, base_bytes + bytes_per_token * sequences_per_pass *
    # (prompt_tokens + max_new_tokens)). The floor is the part no round shape changes (on CUDA with float32 moments,
    # the optimizer step's; 0 from a node that sends none).
    base_bytes: int = 0
    bytes_per_token: int = 0
    prompt_tokens: int = 0
    floor_bytes: int = 0
    # What a copy of the starting weights adds to every full fine-tune figure above, whatever the round shape: the
    # KL's reference model (training.beta > 0) or the pull toward the start (training.anchor_decay > 0) keeps one
    # for the whole run, one for both (0 from a node that sends none).
    reference_bytes: int = 0


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory_bytes: int


@dataclass(frozen=True)
class Hardware:
    """What the node detected (``node.learning.hardware.HardwareInfo`` as the app reads it)."""

    kind: Literal["cuda", "mps", "cpu"]
    description: str  # one line for people: the device, cores, memory
    physical_cores: int
    total_ram_bytes: int
    available_ram_bytes: int
    gpus: tuple[Gpu, ...] = ()

    @property
    def budget_bytes(self) -> int:
        """The memory a model trains in: the first GPU's with CUDA, else the computer's total RAM (MPS shares it)."""
        if self.kind == "cuda" and self.gpus:
            return self.gpus[0].total_memory_bytes
        return self.total_ram_bytes

    @classmethod
    def from_json(cls, data: Any) -> Hardware:
        hardware = decode(cls, data)
        if not isinstance(hardware.gpus, (list, tuple)):
            raise _unreadable("gpus is not a list")
        return dataclasses.replace(hardware, gpus=tuple(decode(Gpu, gpu) for gpu in hardware.gpus))


@dataclass(frozen=True)
class HardwareReport:
    """The answer of ``rl-swarm-node hardware --json``."""

    hardware: Hardware | None  # None when detection failed: the node then decides at start
    recommendation: Recommendation | None
    models: list[ModelFit] = field(default_factory=list)

    @property
    def kind(self) -> Literal["cuda", "mps", "cpu"]:
        return self.hardware.kind if self.hardware else "cpu"

    def model(self, model_id: str) -> ModelFit | None:
        return next((fit for fit in self.models if fit.id == model_id), None)

    def to_json(self) -> dict[str, Any]:
        advice = dataclasses.asdict(self.recommendation) if self.recommendation else None
        return {"hardware": dataclasses.asdict(self.hardware) if self.hardware else None, "recommendation": advice,
                "models": [dataclasses.asdict(fit) for fit in self.models]}

    @classmethod
    def from_json(cls, data: Any) -> HardwareReport:
        """Decode the CLI's answer; fields a newer node adds are ignored, a missing one is a NodeError."""
        if not isinstance(data, dict):
            raise _unreadable(f"expected an object, got {type(data).__name__}")
        hardware = data.get("hardware")
        if not isinstance(hardware, dict):
            raise _unreadable("no hardware section")
        models = data.get("models", [])
        if not isinstance(models, list):
            raise _unreadable("models is not a list")
        advice = data.get("recommendation")
        return cls(Hardware.from_json(hardware), None if advice is None else decode(Recommendation, advice),
                   [decode(ModelFit, model) for model in models])


def default_threads(physical_cores: int | None = None) -> int:
    """Torch threads when ``[run] threads`` is unset: all physical cores but one, so the desktop stays responsive
    while the node trains."""
    cores = physical_cores or psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    return max(1, cores - 1)


T = TypeVar("T")


def decode(cls: type[T], data: Any) -> T:
    """A seam dataclass from its JSON object: unknown keys are dropped, missing ones raise :class:`NodeError`."""
    if not isinstance(data, dict):
        raise _unreadable(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    missing = sorted(f.name for f in dataclasses.fields(cls) if f.name not in data
                     and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    if missing:
        raise _unreadable(f"{cls.__name__} lacks {', '.join(missing)}")
    return cls(**{key: value for key, value in data.items() if key in names})


def _unreadable(what: str) -> NodeError:
    return NodeError(f"the node's answer could not be read ({what})",
                     hint="the app and the node come from different versions: reinstall RL Swarm",
                     code="seam_version")
