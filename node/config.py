"""The node's one typed configuration, shared by the CLI, the GUI and the config file.

A config file is TOML with the sections ``[training]``, ``[swarm]``, ``[tasks]``, ``[evaluation]``, ``[run]``,
``[upload]``, ``[chain]``, ``[notify]``, ``[schedule]``, ``[heat]`` and ``[desktop]`` (the app's own settings); every field below is a key of its section.
The CLI's flags override single fields; those flags are generated from the fields below (name, type, description,
bounds; see :mod:`node.cli.main`). The CLI and the app's dialogs change a config through the one
:meth:`NodeConfig.update`. Validation happens once, in :func:`NodeConfig.build`, and every problem is reported as a
:class:`~node.errors.NodeError` that names the field, the section it lives in and what values are accepted.
"""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs
import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from node.clock import DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS
from node.errors import NodeError
from node import notify as webhook_secret
from node import schedule as resource_schedule
from node.swarm import admission as swarm_secret

# A swarm or run name: it becomes part of DHT keys, invites and folder names.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

APP_NAME = "rl-swarm"


class _Unset:
    """The value of a setting that was not given (a command-line flag left out): the current value stays."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()
Changes = dict[str, dict[str, Any]]


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


PeerChoice = Literal["uniform", "teaching"]
PeerAdvantages = Literal["full", "positive"]
RewardScaling = Literal["group", "none"]


class TrainingSettings(_Section):
    """What is trained and how (SAPO: GRPO over local and peer rollouts)."""

    model: str = Field("bundled", description="catalog id, Hub id, local model folder, .gguf file, or 'bundled'")
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    train_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="bfloat16 = mixed precision with fp32 master weights; auto picks by hardware"
    )
    generation_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="dtype completions are sampled in (a copy of the policy); auto = bfloat16 on CUDA and on "
        "CPUs with native bfloat16 (AVX512-BF16, AMX), float32 elsewhere; float32 turns reduced precision off"
    )
    sampler: Literal["auto", "torch", "onnxruntime", "vllm"] = Field(
        "auto", description="what runs the model while completions are sampled: onnxruntime = ONNX Runtime over "
        "the same float32 weights with the same draw (about 1.8-1.9x the torch loop's tokens per CPU-second on a CPU, but about "
        "1 GB more memory while sampling the bundled model), for float32 Llama-type models on the CPU where "
        "onnxruntime is installed, torch elsewhere; vllm = an in-process vLLM engine on an NVIDIA GPU (CUDA only, "
        "vllm installed; the node refuses to start otherwise), handed the round's weights before each generation, "
        "in generation_dtype; auto = onnxruntime wherever it runs and the round's memory estimate with it still "
        "fits, torch elsewhere (never vllm)",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, ge=0.05, le=0.9,
        description="sampler = vllm: the share of the GPU's memory vLLM takes for its copy of the weights and its "
        "key/value cache while it samples (it sleeps, releasing it, while the node trains); the rest is the "
        "training step's",
    )
    local_questions: int = Field(2, ge=1, le=64, description="I: questions sampled locally per round")
    external_groups: int = Field(2, ge=0, le=64, description="J: peer groups trained on per round (0 = solo)")
    peer_choice: PeerChoice = Field(
        "uniform", description="which J of the fresh peer groups a round takes: uniform = SAPO's uniform choice; "
        "teaching = the groups whose rewards (by our own verifier) spread most first, then those of the families "
        "where this node's own recent accuracy is lowest. Either way registered peers come first and each network "
        "gets one group before a second of any",
    )
    peer_advantages: PeerAdvantages = Field(
        "full", description="what a peer group's completions teach: full = SAPO's GRPO advantages, above the group's "
        "mean pushed up and below it pushed down; positive = only those above the mean, the ones below get advantage "
        "0 (the peer's text was sampled by another policy: pushing down what our own policy would not write moves "
        "weights without teaching it anything). Our own groups always keep full advantages (the "
        "answer-critique-revise game trains only its own)",
    )
    scale_rewards: RewardScaling = Field(
        "group", description="how a group's rewards become advantages after its mean is taken off: group = divided by "
        "the group's standard deviation (GRPO, SAPO), so a group whose rewards differ only by the format bonus pushes "
        "as hard as one with a right answer; none = not divided (Dr. GRPO), each completion pushed by how much its "
        "reward differs from its group's mean",
    )
    num_generations: int = Field(4, ge=2, le=64, description="G: completions per question")
    max_new_tokens: int = Field(128, ge=8, le=4096)
    max_prompt_tokens: int = Field(1024, ge=32, le=32768, description="longer prompts are cut from the left")
    temperature: float = Field(1.0, gt=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    learning_rate: float = Field(5e-6, gt=0.0, le=1e-2)
    lr_decay_rounds: int = Field(
        0, ge=0, le=1_000_000,
        description="N > 0: update k uses learning_rate / sqrt(1 + k / N), halved after 3N updates, so later rounds "
        "take smaller steps; 0 = constant",
    )
    beta: float = Field(0.0, ge=0.0, description=(
        "KL coefficient toward the model the run started from (also after a resume); 0 = no reference model "
        "(as in SAPO)"))
    anchor_decay: float = Field(
        0.0, ge=0.0,
        description="> 0: each update pulls every weight back toward its starting value (the model the run started "
        "from, also after a resume) by learning_rate x anchor_decay of the distance, a reference-free brake on drift "
        "that costs no extra forward pass but a float32 copy of the weights (4 bytes a parameter); full fine-tuning "
        "only; 0 = off",
    )
    epsilon: float = Field(0.2, gt=0.0, lt=1.0, description="lower clip range")
    epsilon_high: float = Field(0.28, gt=0.0, lt=1.0, description="upper clip range")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "grpo"
    max_grad_norm: float = Field(1.0, gt=0.0)
    micro_batch_groups: int = Field(
        0, ge=0, le=128,
        description="groups per forward/backward pass; 0 = the whole round at once. Smaller saves memory; "
        "the update stays exact for grpo and dr_grpo",
    )
    optimizer_states: Literal["auto", "float32", "8bit"] = Field(
        "auto", description="how AdamW keeps its two moments: 8bit (bitsandbytes, block-wise quantized, float32 update "
        "math) needs a quarter of float32's memory; auto = 8bit for full fine-tuning on CUDA and CPU where bitsandbytes "
        "is installed (on CPU a step a few seconds slower; float32 = faster steps where memory is plentiful)",
    )
    lora_rank: int = Field(
        0, ge=0, le=1024,
        description="train a LoRA adapter of this rank (peft) instead of all weights: a fraction of the memory; "
        "0 = full fine-tuning. Adapters usually want a learning rate ~10x higher",
    )
    lora_alpha: float | None = Field(None, gt=0.0, description="LoRA scale numerator; empty = 2 x lora_rank")
    lora_target_modules: str = Field(
        "all-linear", description="modules that get an adapter: 'all-linear' or comma-separated names (q_proj,v_proj)"
    )
    lora_upload: Literal["merged", "adapter"] = Field(
        "merged", description="upload the adapter merged into the base weights (a plain model), or the adapter alone"
    )
    format_reward_weight: float = Field(0.0, ge=0.0, le=1.0, description="bonus for a well-formed <answer> block")
    drop_zero_advantage: bool = Field(True, description="drop peer groups whose completions all scored the same")

    @model_validator(mode="after")
    def _consistent(self) -> TrainingSettings:
        if self.sampler == "vllm" and self.device in ("cpu", "mps"):
            raise ValueError(f"sampler = vllm samples on an NVIDIA GPU (CUDA) only, and device is {self.device}: "
                             "set sampler = auto (or torch), or device = auto or cuda on a machine with CUDA")
        if self.epsilon_high < self.epsilon:
            raise ValueError(f"epsilon_high ({self.epsilon_high}) must be >= epsilon ({self.epsilon})")
        if self.anchor_decay and self.lora_rank:
            raise ValueError("anchor_decay pulls all weights toward the starting model and works with full "
                             "fine-tuning only: set anchor_decay = 0 to train a LoRA adapter, or lora_rank = 0")
        if self.learning_rate * self.anchor_decay >= 1:
            raise ValueError(f"learning_rate x anchor_decay ({self.learning_rate * self.anchor_decay:g}) is the share "
                             "of the distance to the starting weights each update takes back and must be below 1 "
                             f"(1 resets the weights every update): lower anchor_decay below "
                             f"{1 / self.learning_rate:g}")
        return self

    @property
    def starting_copy(self) -> tuple[str, ...]:
        """The settings, by config key, that keep a float32 copy of the starting weights for the whole run: the pull
        toward the start and the KL's reference model, one copy for both. Full fine-tuning only: a LoRA run's
        reference is its base model with the adapter disabled (and the pull is refused with one)."""
        if self.lora_rank:
            return ()
        return tuple(key for key in ("anchor_decay", "beta") if getattr(self, key) > 0)


Game = Literal["sapo", "multistage"]
GAMES: tuple[str, ...] = get_args(Game)


class SwarmSettings(_Section):
    """How this node finds and talks to its peers, and which game the swarm plays."""

    swarm_name: str = Field("local", pattern=NAME_PATTERN)
    game: Game = Field(
        "sapo",
        description="sapo = share rollouts, one GRPO update per round; multistage = answer, critique peers' answers, "
        "revise (one update per stage); every member of a swarm must play the same game (invites carry it)",
    )
    critique_answers: int = Field(5, ge=1, le=8, description="multistage: K, the peers' answers a critic judges")
    initial_peers: list[str] = Field(default_factory=list, description="invite multiaddrs; empty = start a swarm")
    host: str = "0.0.0.0"
    port: int = Field(0, ge=0, le=65535, description="0 = any free port")
    gather_timeout_s: float = Field(
        20.0, ge=0.0, le=3600.0,
        description="multistage: longest wait for peers' answers or critiques before a stage (SAPO rounds never wait)",
    )
    round_seconds: float = Field(
        DEFAULT_ROUND_SECONDS, ge=1.0, le=3600.0,
        description="swarm-wide: length of a swarm round, the slice of time peers publish under (invites carry it)",
    )
    swarm_epoch: float = Field(
        DEFAULT_EPOCH, ge=0.0, le=4e9, description="swarm-wide: unix time at which round 0 began (invites carry it)"
    )
    peer_group_max_age_s: float | None = Field(
        None, ge=1.0, le=86400.0,
        description="peer groups older than this are never trained on; empty = automatic: 2 minutes or 3 of this "
        "node's own rounds, whichever is longer",
    )
    peer_buffer_mib: int = Field(16, ge=1, le=1024, description="most peer text kept for the rounds to come, in MiB")
    peer_buffer_per_peer: int = Field(8, ge=1, le=256, description="most groups of any one peer kept for later rounds")
    record_ttl_s: float = Field(600.0, ge=10.0, le=86400.0)
    call_timeout_s: float = Field(10.0, gt=0.0, le=300.0, description="timeout of each DHT call")
    directory_shards: int = Field(
        8, ge=1, le=4096, description="swarm-wide: shards of the round directory (~ peers / 128 for large swarms)"
    )
    max_fetches_per_round: int | None = Field(
        None, ge=1, le=1024, description="peer groups fetched per round at most; empty = 3 x external_groups"
    )
    client_mode: bool = Field(False, description="always publish and gather without serving the DHT (a node that is "
                              "not reachable does so by itself)")
    reachability: Literal["auto", "public", "private"] = Field(
        "auto", description="auto = ask peers whether they can connect to this node (and map a port over UPnP); "
        "public = it is reachable (serves the DHT, relays for others); private = it is not (reached through relays)",
    )
    reachable_networks: list[str] = Field(
        default_factory=list,
        description="address ranges every member can reach besides the internet, e.g. a company network 10.0.0.0/8",
    )
    address_prefix_v4: int = Field(
        24, ge=8, le=32, description="peers whose IPv4 addresses share this many leading bits count as one peer "
        "(storage quotas, sampling peer groups): identities are free, addresses are not",
    )
    address_prefix_v6: int = Field(48, ge=16, le=128, description="the same for IPv6 addresses")
    peer_text_ratio: float = Field(
        2.0, ge=1.0, le=100.0,
        description="peer completions may carry at most this many times our own longest text outside <answer>",
    )
    peer_logprob_floor: float | None = Field(
        None, ge=-100.0, le=0.0,
        description="drop peer groups with a completion whose mean per-token log-prob under our policy is below "
        "this; empty = off. -7 drops gibberish and random-token text, not fluent payloads (which score like our "
        "own samples); costs one forward pass per peer group considered",
    )

    @model_validator(mode="after")
    def _networks(self) -> SwarmSettings:
        for network in self.reachable_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"reachable_networks: {network!r} is not an address range like 10.0.0.0/8") from None
        return self


class TaskSettings(_Section):
    """Which reasoning-gym task families are trained on."""

    weights: dict[str, float] = Field(
        default_factory=dict,
        description="family -> weight; empty = chosen for the model's size (easy arithmetic with a difficulty "
        "ladder for models under 450M parameters, the nine SAPO families from Qwen2.5-0.5B up)",
    )
    configs: dict[str, dict[str, Any]] = Field(default_factory=dict, description="per-family generator options")
    seed: int | None = Field(None, ge=0, description="dataset seed; default derives one from the peer id")
    adaptive_difficulty: bool = Field(
        True, description="move each family up or down its difficulty ladder with recent accuracy"
    )


class EvaluationSettings(_Section):
    """Held-out evaluation on tasks never trained on (a seed range training does not use)."""

    every_rounds: int = Field(10, ge=0, description="evaluate at round 0 and every N rounds trained; 0 = never")
    questions: int = Field(64, ge=1, le=4096, description="size of the fixed evaluation set")
    samples: int = Field(
        0, ge=0, le=64,
        description="sampled answers per question for the mean exact-match; 0 = means over the greedy answers",
    )
    seed: int = Field(0, ge=0, description="picks the evaluation set; peers with the same seed share it")
    levels: int = Field(2, ge=1, le=16, description="difficulty levels of each family in the evaluation set")


class RunSettings(_Section):
    """Where results go, how long to run and how much of the machine to use."""

    data_dir: Path = Field(default_factory=default_data_dir)
    run_name: str = Field("default", pattern=NAME_PATTERN)
    identity_file: Path | None = Field(None, description="libp2p peer key; empty = <data_dir>/identity/swarm.key")
    rounds: int | None = Field(None, ge=1, description="stop after this many rounds; empty = run until stopped")
    checkpoint_minutes: float = Field(
        20.0, ge=0.5, le=1440.0,
        description="save model, optimizer and round after this many minutes of training; a checkpoint is also "
        "saved on pause, stop and quit, and before an upload",
    )
    checkpoint_every_rounds: int | None = Field(
        None, ge=1, description="also save every N rounds (each save of the bundled model writes ~1 GB); empty = by "
        "time and event only",
    )
    threads: int | None = Field(None, ge=1, le=1024, description="CPU threads for torch; empty = cores - 1")
    gpu_memory_fraction: float | None = Field(None, gt=0.0, le=1.0)
    seed: int = Field(0, ge=0, description="sampling and training seed")


class ChainSettings(_Section):
    """The on-chain swarm coordinator (optional): registration, round clock, bootnodes, rewards."""

    network: Literal["none", "gensyn-testnet", "local", "custom"] = Field(
        "none", description="none = train without a chain; presets fill rpc_url and chain_id (see node.chain.networks)"
    )
    rpc_url: str | None = Field(None, pattern=r"^https?://\S+$", description="JSON-RPC endpoint; empty = the preset's")
    chain_id: int | None = Field(None, ge=1, description="expected chain id; empty = the preset's")
    coordinator: str | None = Field(
        None, pattern=r"^0x[0-9a-fA-F]{40}$", description="SwarmCoordinator contract address; empty = the preset's"
    )
    coordinator_version: Literal["auto", "0.4.2", "0.4.3", "0.5.1", "0.6.0"] = Field(
        "auto", description="the SwarmCoordinator interface the swarm runs; auto = detect it, a version = detect and "
        "refuse to start on any other",
    )
    wallet: str = Field("default", pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$", description="wallet name in the data folder")
    rpc_timeout_s: float = Field(10.0, gt=0.0, le=300.0, description="timeout of each RPC call")
    follow_round: bool = Field(
        True, description="multistage: jump to the chain's current round and stage when it is ahead (SAPO rounds are "
        "this node's own, published under the time-derived swarm round)",
    )
    use_bootnodes: bool = Field(True, description="join the bootnodes listed on the contract")
    submit: bool = Field(True, description="submit this node's reward and winners each chain round")
    poll_interval_s: float = Field(10.0, ge=0.2, le=600.0, description="how often the chain's round is read")


class DesktopSettings(_Section):
    """How the desktop app runs the node (the headless node ignores this section)."""

    start_training_on_launch: bool = Field(True, description="start the node when the app opens")
    pause_on_battery: bool = Field(False, description="hold training while the computer runs on battery")
    pause_when_user_active: bool = Field(False, description="train only while the computer is idle")
    idle_minutes: int = Field(5, ge=1, le=240, description="minutes without keyboard or mouse input that count as idle")
    start_at_login: bool = Field(False, description="open the app (in the tray) when the user logs in")


class UploadSettings(_Section):
    """Publishing the trained model to the Hugging Face Hub (see node/hub/upload.py)."""

    repo_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$",
        description="<user or org>/<name>; empty = <user>/<model>-swarm-<peer name>",
    )
    private: bool = Field(True, description="create the repo private (an existing repo keeps its visibility)")
    every_rounds: int = Field(0, ge=0, description="upload automatically every N rounds trained; 0 = off")
    endpoint: str | None = Field(
        None, pattern=r"^https?://[^\s/]+(/[^\s]*)?$", description="Hub URL; empty = HF_ENDPOINT or huggingface.co"
    )


class RemoteNodeSettings(_Section):
    """A node on another computer that the app's fleet view watches over SSH (``ssh HOST rl-swarm-node attach``)."""

    name: str = Field(pattern=NAME_PATTERN, description="what the fleet view calls it")
    host: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.@:%-]{0,253}$",
                      description="SSH destination: a Host of your ~/.ssh/config, a host name, or user@host")
    port: int | None = Field(None, ge=1, le=65535, description="SSH port; empty = as your SSH setup says")
    run_name: str = Field("default", pattern=NAME_PATTERN, description="the run's name there ([run] run_name)")
    data_dir: str | None = Field(None, pattern=r"^[^\x00-\x1f]{1,1024}$",
                                 description="the node's data folder there; empty = its default")
    node_command: str = Field("rl-swarm-node", pattern=r"^[^\x00-\x1f]{1,1024}$",
                              description="how the node's CLI is run there, e.g. ~/rl-swarm/.venv/bin/rl-swarm-node")
    ssh_config: Path | None = Field(None, description="an ssh_config file to use instead of ~/.ssh/config")


class FleetSettings(_Section):
    """The fleet view's saved remote nodes (this computer's node is always listed)."""

    remotes: list[RemoteNodeSettings] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _names_unique(self) -> FleetSettings:
        names = [remote.name for remote in self.remotes]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"remote node names must be unique; {', '.join(twice)} is used twice: rename one")
        return self


class NotifySettings(_Section):
    """Notifications off the machine: a webhook told when something needs the user (see node/notify.py). Its URL is a
    secret, kept in the secret store (Settings, or ``rl-swarm-node webhook set``), never in this file."""

    no_peers_rounds: int = Field(
        10, ge=0, le=100_000, description="notify once no peer was seen for this many rounds in a row; 0 = never"
    )


class ProfileSettings(_Section):
    """One resource profile: on these days, between these local times, use this many threads or pause."""

    days: str = Field("daily", description="mon-fri, sat,sun, daily, weekdays, weekends")
    start: str = Field("00:00", description="local time HH:MM it begins")
    end: str = Field("24:00", description="local time HH:MM it ends; before start = past midnight")
    threads: int | None = Field(None, ge=1, le=1024, description="CPU threads meanwhile")
    paused: bool = Field(False, description="no training meanwhile")

    @model_validator(mode="after")
    def _valid(self) -> ProfileSettings:
        resource_schedule.parse_days(self.days)
        resource_schedule.parse_time(self.start)
        resource_schedule.parse_time(self.end)
        if self.threads is None and not self.paused:
            raise ValueError("a profile sets threads = N or paused = true (otherwise it changes nothing)")
        return self

    def profile(self) -> resource_schedule.Profile:
        return resource_schedule.Profile(
            days=resource_schedule.parse_days(self.days), start=resource_schedule.parse_time(self.start),
            end=resource_schedule.parse_time(self.end),
            threads=self.threads, paused=self.paused,
        )


class ScheduleSettings(_Section):
    """When the node trains at full speed, slowed down, or not at all (by the computer's local time)."""

    profiles: list[ProfileSettings] = Field(
        default_factory=list,
        description="e.g. [{days = \"mon-fri\", start = \"09:00\", end = \"18:00\", threads = 1}]; outside them "
        "the node uses [run] threads; empty = always",
    )


class HeatSettings(_Section):
    """Slow down when the computer runs hot (CPU and GPU sensors, where the system lets programs read them)."""

    max_celsius: float | None = Field(
        90.0, ge=40.0, le=120.0,
        description="above this temperature the node slows down (threads_when_hot, a pause between rounds); "
        "empty = never",
    )
    resume_celsius: float = Field(80.0, ge=30.0, le=115.0, description="full speed again below this")
    threads_when_hot: int = Field(1, ge=1, le=1024, description="CPU threads while too hot")
    cooldown_s: float = Field(30.0, ge=0.0, le=3600.0, description="pause between rounds while too hot")

    @model_validator(mode="after")
    def _hysteresis(self) -> HeatSettings:
        if self.max_celsius is not None and self.resume_celsius >= self.max_celsius:
            raise ValueError(f"resume_celsius ({self.resume_celsius}) must be below max_celsius ({self.max_celsius})")
        return self


class NodeConfig(_Section):
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    swarm: SwarmSettings = Field(default_factory=SwarmSettings)
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    run: RunSettings = Field(default_factory=RunSettings)
    chain: ChainSettings = Field(default_factory=ChainSettings)
    desktop: DesktopSettings = Field(default_factory=DesktopSettings)
    upload: UploadSettings = Field(default_factory=UploadSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    heat: HeatSettings = Field(default_factory=HeatSettings)

    @classmethod
    def build(cls, data: dict[str, Any] | None = None, *, source: str = "configuration") -> NodeConfig:
        """Validate nested settings; every error names the field and how to fix it."""
        data = _without_retired(data or {})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _as_node_error(exc, source) from None

    @classmethod
    def load(cls, path: Path, changes: Changes | None = None) -> NodeConfig:
        """A config file, with ``changes`` applied as :meth:`update` applies them, validated once."""
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NodeError(f"config file {path} does not exist", hint="check the path or omit --config") from None
        except tomllib.TOMLDecodeError as exc:
            raise NodeError(f"config file {path} is not valid TOML: {exc}", hint="fix the line it names") from None
        swarm, notify = data.get("swarm"), data.get("notify")
        plaintext = swarm.pop(swarm_secret.LEGACY_FIELD, None) if isinstance(swarm, dict) else None
        webhook = notify.pop(webhook_secret.LEGACY_FIELD, None) if isinstance(notify, dict) else None
        config = cls.build(_apply(data, changes or {}), source=str(path))
        # Earlier versions kept a private swarm's secret and the webhook URL in the file
        if plaintext is not None or webhook is not None:
            own = cls.build(data, source=str(path))  # the file's own swarm and data folder, not a flag's
            if plaintext is not None:
                swarm_secret.move_out_of_config(Path(path), own.run.data_dir, own.swarm.swarm_name, plaintext)
            if webhook is not None:
                webhook_secret.move_out_of_config(Path(path), own.run.data_dir, webhook)
        return config

    def update(self, changes: Changes, *, source: str = "configuration") -> NodeConfig:
        """The one way to change settings (section -> field -> value), validated like :meth:`build`.

        Every value given is set, ``None`` included (None = automatic / empty, for the fields that allow it); a
        value of :data:`UNSET` means "not given" and keeps the current value (a command-line flag left out).
        """
        return NodeConfig.build(_apply(self.model_dump(mode="json"), changes), source=source)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(tomli_w.dumps(self.to_dict()), encoding="utf-8")
        tmp.replace(path)

    @property
    def run_dir(self) -> Path:
        return self.run.data_dir / "runs" / self.run.run_name

    @property
    def identity_path(self) -> Path:
        return self.run.identity_file or self.run.data_dir / "identity" / "swarm.key"

    @property
    def model_cache_dir(self) -> Path:
        return self.run.data_dir / "models"


# Settings earlier versions wrote into config files that mean nothing any more: dropped on load, not refused
_RETIRED = {
    "swarm": ("round_quorum", "round_quorum_fraction", "max_round_jump"),  # the quorum round clock
    # checkpoints every N rounds wrote ~30 GB an hour with the bundled model: now by time (checkpoint_minutes)
    "run": ("checkpoint_every",),
}


def _without_retired(data: dict[str, Any]) -> dict[str, Any]:
    data = dict(data)
    for section, fields in _RETIRED.items():
        if isinstance(data.get(section), dict):
            data[section] = {key: value for key, value in data[section].items() if key not in fields}
    return data


def _apply(data: dict[str, Any], changes: Changes) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()}
    for section, fields in changes.items():
        if fields is UNSET:
            continue
        if not isinstance(fields, dict):
            raise NodeError(f"[{section}] must be a table of settings, got {fields!r}", code="invalid_config")
        target = merged.setdefault(section, {})
        target.update({key: value for key, value in fields.items() if value is not UNSET})
    return merged


def given(fields: dict[str, Any]) -> dict[str, Any]:
    """For argparse namespaces, where a flag left out reads None: None becomes :data:`UNSET` (keep the value)."""
    return {key: UNSET if value is None else value for key, value in fields.items()}


def _as_node_error(exc: ValidationError, source: str) -> NodeError:
    problems = []
    for err in exc.errors():
        location = [str(part) for part in err["loc"]]
        where = f"[{location[0]}] {'.'.join(location[1:])}" if len(location) > 1 else location[0]
        if err["type"] == "extra_forbidden":
            problems.append(f"{where}: unknown setting")
        else:
            problems.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
    return NodeError(
        f"invalid {source}: " + "; ".join(problems),
        hint="fix these settings in the config file or the matching command-line flags; "
        "`rl-swarm-node run --help` lists every flag with its allowed values",
        code="invalid_config",
    )
