"""A swarm participant: wiring its parts, the loop of rounds, and pause / resume / stop.

:func:`build_node` returns an unstarted :class:`SwarmNode`; :meth:`SwarmNode.run` wires the parts
(:meth:`SwarmNode._setup`: hardware, tasks, model, learner, exchange, evaluator) and then loops: held-out
evaluation at round 0 and every N rounds, one round (:func:`node.sapo.round.play_round`, which reads top to bottom),
persist metrics and samples, checkpoint by training time and on pause, stop and before an upload
(:mod:`node.checkpoint_policy`). Everything the outside world learns goes through typed
events (:mod:`node.events`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial

import torch

from node import allocator
from node.checkpoint_policy import CheckpointPolicy, CheckpointReason
from node.clock import SwarmClock
from node.config import NodeConfig
from node.errors import NodeError
from node.events import (
    CheckpointSaved, EventBus, ErrorReported, NodeStarted, NodeState, PeerJoined, PeerLeft, ReachabilityChanged,
    RoundProgress,
    StateChanged,
)
from node.game.driver import GameCancelled, GameDriver, build_driver
from node.hub.auto_upload import AutoUploader
from node.learning import hardware, limits, models, ort_decoding, vllm_decoding
from node.learning.checkpoint import ADAPTER, Checkpointer, CheckpointState
from node.learning.evaluation import EvalCancelled, EvalSettings, Evaluator
from node.learning.grpo import GrpoLearner, LoraSettings, Policy
from node.governor import ResourceGovernor
from node.heat import HeatGuard, read_temperatures
from node.notify import NotificationRules, Webhook, load_webhook
from node.runstore import RunStore
from node.sapo.round import RoundCancelled, RoundParts, RoundSettings, connect_peers, disconnect_peers, play_round
from node.swarm import known_peers, admission as swarm_secret
from node.swarm.exchange import Exchange
from node.swarm.identity import Identity, load_or_create, peer_name
from node.swarm.records import MAX_ROUND
from node.tasks.curriculum import Curriculum, TaskMix, default_mix
from node.tasks.source import TaskSource

log = logging.getLogger(__name__)

PEER_GONE_ROUNDS = 3  # a peer unseen this many rounds counts as left

ExchangeFactory = Callable[[NodeConfig, Identity, list[str]], Exchange]


def build_node(config: NodeConfig, *, bus: EventBus | None = None,
               exchange: ExchangeFactory | None = None) -> SwarmNode:
    """A node for ``config``, not started yet; ``exchange`` replaces the DHT (e.g. an in-memory exchange)."""
    return SwarmNode(config, bus=bus, exchange=exchange)


class SwarmNode:
    """Runs rounds until the configured count is reached or :meth:`stop` is called.

    :meth:`pause`, :meth:`resume` and :meth:`stop` are thread-safe and take effect between rounds (a stop also
    cuts short the wait for peers). :meth:`run` blocks; the swarm is always shut down when it returns.
    """

    def __init__(self, config: NodeConfig, *, bus: EventBus | None = None,
                 exchange: ExchangeFactory | None = None) -> None:
        self.config = config
        self.bus = bus or EventBus()
        self._exchange_factory = exchange or _dht_exchange
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._checkpoint_requested = threading.Event()
        self.checkpoints = CheckpointPolicy(config.run.checkpoint_minutes * 60.0, config.run.checkpoint_every_rounds)
        self._state: NodeState | None = None
        self.swarm: Exchange | None = None
        self.parts: RoundParts | None = None
        self.evaluator: Evaluator | None = None
        self.identity: Identity | None = None
        self.chain = None  # ChainParticipant when a chain is configured
        self._chain_round: int | None = None  # the chain's round when the current training round began
        self._peer_last_seen: dict[str, int] = {}
        self.uploader: AutoUploader | None = None
        self.game: GameDriver | None = None  # set up when the swarm plays the multi-stage game
        self.governor: ResourceGovernor | None = None  # the schedule's and the heat's limits, checked every round
        self.now = datetime.now  # local time for the schedule (tests replace it)
        self.read_temperatures = read_temperatures  # the heat guard's sensors (tests replace them)

    # ----------------------------------------------------------------------------------------------- controls
    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        self._stop.set()
        self._resume.set()

    def request_checkpoint(self) -> None:
        """Save a checkpoint after the round in progress (e.g. before a manual upload reads the latest one)."""
        self._checkpoint_requested.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------------------------------------ running
    def run(self) -> None:
        webhook = None
        url = self._webhook_url()
        if url:  # told from the node's own events, so a headless node notifies too
            webhook = Webhook(url)
            rules = NotificationRules(webhook.send, no_peers_rounds=self.config.notify.no_peers_rounds)
            self.bus.subscribe(rules.observe)
        try:
            self._run()
        finally:
            if webhook is not None:
                webhook.close()  # a few seconds at most for the "stopped" notification

    def _webhook_url(self) -> str | None:
        """The webhook the user set, from the secret store; one that cannot be read (a locked store) does not stop
        training: the node says so and runs without it."""
        try:
            return load_webhook(self.config.run.data_dir)
        except NodeError as exc:
            log.warning("no webhook notifications: %s", exc.message)
            self.bus.emit(ErrorReported(message=f"{exc.message} No notifications leave this computer.",
                                        hint=exc.hint))
            return None

    def _run(self) -> None:
        self._set_state("starting")
        try:
            self._setup()
            self._loop()
        except NodeError as exc:
            self.bus.emit(ErrorReported(message=exc.message, hint=exc.hint, fatal=True))
            self._set_state("error", exc.message)
            raise
        except Exception as exc:
            log.exception("node crashed")
            self.bus.emit(ErrorReported(message=f"node crashed: {exc!r}", hint="see the node log", fatal=True))
            self._set_state("error", repr(exc))
            raise
        finally:
            if self.chain is not None:
                self.chain.stop()
            if self.uploader is not None:
                self.uploader.close(should_cancel=lambda: self.stopping or self._state == "error")
            if self.parts is not None:
                disconnect_peers(self.parts)
            if self.swarm is not None:
                self._remember_peers()
                self.swarm.shutdown()
        self._set_state("stopped")

    def _setup(self) -> None:
        cfg = self.config
        train = cfg.training
        hw = hardware.detect()
        device = hw.kind if train.device == "auto" else train.device
        if device != "cpu" and device != hw.kind:
            raise NodeError(f"device {device!r} is not available here ({hw.describe()})", hint="use --device auto")
        allocator.tame_heap()  # a node started by hand lacks node_environment()'s malloc settings
        applied = limits.apply_resource_limits(
            threads=cfg.run.threads, gpu_memory_fraction=cfg.run.gpu_memory_fraction, device=device
        )
        log.info("hardware: %s; limits: %s", hw.describe(), applied)
        configured_threads = applied["threads"]
        heat = cfg.heat
        self.governor = ResourceGovernor(
            [p.profile() for p in cfg.schedule.profiles],
            HeatGuard(heat.max_celsius, heat.resume_celsius, read=self.read_temperatures),
            threads_when_hot=heat.threads_when_hot, cooldown_s=heat.cooldown_s, emit=self.bus.emit, now=self.now,
            set_threads=lambda threads: torch.set_num_threads(threads or configured_threads),
        )
        mixed_bf16 = _pick_bf16(train.train_dtype, device, hw, sampling=False)
        generation_dtype = torch.bfloat16 if _pick_bf16(train.generation_dtype, device, hw, sampling=True) else torch.float32

        self.run_dir = cfg.run_dir
        self.store = RunStore(self.run_dir)
        cfg.save(self.run_dir / "config.toml")
        self.identity = load_or_create(cfg.identity_path)
        initial_peers = list(cfg.swarm.initial_peers)
        if cfg.chain.network != "none":  # fail fast on a locked wallet or a wrong chain, before the model loads
            from node.chain.participant import ChainParticipant

            self.chain = ChainParticipant(cfg, self.identity.peer_id, self.bus)
            own = f"/p2p/{self.identity.peer_id}"
            initial_peers += [p for p in self.chain.start() if p not in initial_peers and not p.endswith(own)]
        resolved = models.resolve(train.model)
        mix = task_mix(cfg, resolved.params)
        self.tasks = TaskSource(
            mix.weights, seed=_task_seed(cfg, self.identity.peer_id), configs=cfg.tasks.configs, ladders=mix.ladders
        )
        groups = train.local_questions + train.external_groups
        per_pass = min(train.micro_batch_groups or groups, groups) * train.num_generations
        adamw_8bit = models.uses_adamw_8bit(train.optimizer_states, lora=bool(train.lora_rank), device=device)
        fit = {
            "available_bytes": hardware.training_budget(hw), "train_dtype": "bfloat16" if mixed_bf16 else "float32",
            "num_sequences": per_pass,
            "seq_len": min(train.max_prompt_tokens, hardware.PROMPT_TOKENS) + train.max_new_tokens,
            "lora_rank": train.lora_rank, "adamw_8bit": adamw_8bit, "cuda": device == "cuda",
            "starting_copy": train.starting_copy,
            "sampling_copy": generation_dtype != models.weights_dtype(device, lora=bool(train.lora_rank), bf16=mixed_bf16),
        }
        sampler = pick_sampler(train.sampler, resolved, device=device, generation_dtype=generation_dtype, fit=fit)
        if sampler == "vllm":
            # vLLM's share of the GPU is taken when it starts and its own copy of the weights lives in it: the round
            # must fit in the rest (its sleep between generations hands that back, which this leaves as headroom).
            fit = {**fit, "available_bytes": int(fit["available_bytes"] * (1 - train.vllm_gpu_memory_utilization)),
                   "sampling_copy": False}
        # Counted before the model is loaded, so for any architecture: only the checks after loading can tell.
        models.check_fits(resolved, **fit,
                          onnxruntime_sampler=sampler != "torch" and _onnxruntime_samples(device, generation_dtype))
        self.checkpointer = Checkpointer(self.run_dir / "checkpoints")
        latest = self.checkpointer.latest()
        if latest is not None and latest[1].model != train.model:
            raise NodeError(
                f"the run {cfg.run.run_name!r} was trained from {latest[1].model!r}, not {train.model!r}",
                hint="pick another run name (--run-name) to start a new run with this model",
            )
        lora = LoraSettings(train.lora_rank, train.lora_alpha, train.lora_target_modules) if train.lora_rank else None
        if latest is not None and latest[1].lora_rank != train.lora_rank:
            raise NodeError(
                f"the run {cfg.run.run_name!r} was trained with lora_rank={latest[1].lora_rank}, "
                f"not {train.lora_rank}",
                hint="pick another run name (--run-name) to start a new run with these settings",
            )
        adapter_dir = latest[0] / ADAPTER if latest and lora else None
        # An adapter run resumes from the base model plus its saved adapter; a full run from its own weights.
        source = models.ResolvedModel(
            ref=train.model, kind="local_dir", path_or_id=str(latest[0] / "model"), gguf_file=None, params=None
        ) if latest and not lora else resolved
        dtype = models.weights_dtype(device, lora=bool(lora), bf16=mixed_bf16)
        model, tokenizer = models.load(source, cache_dir=cfg.model_cache_dir, dtype=dtype, device=device)
        starting_weights = None
        if train.starting_copy and source is not resolved:
            # The pull and the KL's reference are the weights the run started from: a resumed run loads its
            # checkpoint above, so the original model is loaded once more for its weights alone (once for both).
            starting_weights = models.load_weights(resolved, cache_dir=cfg.model_cache_dir, dtype=dtype, device=device)
        self.policy = Policy(model, tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=train.max_prompt_tokens,
                             sampler=sampler, vllm_gpu_memory_utilization=train.vllm_gpu_memory_utilization)
        self.learner = GrpoLearner(
            self.policy, output_dir=self.run_dir / "trl", device=device, mixed_bf16=mixed_bf16,
            num_generations=train.num_generations, max_new_tokens=train.max_new_tokens,
            learning_rate=train.learning_rate, beta=train.beta, epsilon=train.epsilon,
            epsilon_high=train.epsilon_high, loss_type=train.loss_type, max_grad_norm=train.max_grad_norm,
            seed=cfg.run.seed, micro_batch_groups=train.micro_batch_groups, lora=lora, adapter_dir=adapter_dir,
            adamw_8bit=adamw_8bit, lr_decay_rounds=train.lr_decay_rounds, anchor_decay=train.anchor_decay,
            starting_weights=starting_weights, scale_rewards=train.scale_rewards,
        )
        del starting_weights  # the learner holds them now, in its reference model or cast to where the weights live
        if latest:
            folder, state = latest
            self.checkpointer.load_optimizer(folder, self.learner.optimizer)
            self.learner.global_step = state.global_step
            self.last_round: int | None = state.round
            if type(state.round) is not int or not 0 <= state.round <= MAX_ROUND:
                # e.g. saved by a version that followed a hostile round clock: keep the weights, rejoin the swarm
                message = (f"The last checkpoint says round {state.round!r}, outside the rounds a swarm uses "
                           f"(0 to {MAX_ROUND}). Repaired: its trained weights are kept, the round is taken from "
                           "the swarm again, and the run's round history is cleared.")
                log.warning("%s", message)
                self.bus.emit(ErrorReported(message=message, hint="nothing to do: training goes on", fatal=False))
                self.last_round = None
            self.rounds_trained = state.rounds_trained
            log.info("resumed from the checkpoint of round %s (%s rounds trained)", self.last_round,
                     state.rounds_trained)
        else:
            self.last_round = None
            self.rounds_trained = 0
        self.store.truncate_after(self.last_round)
        self.uploader = AutoUploader(cfg, self.bus, rounds_trained=self.rounds_trained)

        self.curriculum = Curriculum(
            {family: len(levels) if cfg.tasks.adaptive_difficulty else 1 for family, levels in self.tasks.levels.items()},
            start=self.store.metrics()[-1].difficulty if self.last_round is not None and self.store.metrics() else None,
        )
        evaluation = cfg.evaluation
        if evaluation.every_rounds:
            self.evaluator = Evaluator(self.policy, self.tasks, EvalSettings(
                questions=evaluation.questions, samples=evaluation.samples, max_new_tokens=train.max_new_tokens,
                temperature=train.temperature, top_p=train.top_p, seed=evaluation.seed, levels=evaluation.levels,
            ))
        self.swarm = self._exchange_factory(cfg, self.identity, initial_peers)
        if hasattr(self.swarm, "report_reachability_to"):
            self.swarm.report_reachability_to(partial(self._reachability_changed, starting_swarm=not initial_peers))
        if self.chain is not None and hasattr(self.swarm, "prefer"):  # the DHT's fetches: registered peers first
            self.swarm.prefer(self.chain.registered_peers)
        self.swarm.start()
        self.parts = RoundParts(
            peer_id=self.identity.peer_id, tasks=self.tasks, policy=self.policy, learner=self.learner,
            exchange=self.swarm, curriculum=self.curriculum,
            settings=RoundSettings(
                local_questions=train.local_questions, external_groups=train.external_groups,
                num_generations=train.num_generations, max_new_tokens=train.max_new_tokens,
                temperature=train.temperature, top_p=train.top_p, format_reward_weight=train.format_reward_weight,
                drop_zero_advantage=train.drop_zero_advantage,
                peer_text_ratio=cfg.swarm.peer_text_ratio, peer_logprob_floor=cfg.swarm.peer_logprob_floor,
                peer_choice=train.peer_choice, peer_advantages=train.peer_advantages,
            ),
            registry=self.chain, clock=swarm_clock(cfg),
        )
        if cfg.swarm.game == "sapo":
            connect_peers(self.parts, max_bytes=cfg.swarm.peer_buffer_mib * 1024**2,
                          max_per_peer=cfg.swarm.peer_buffer_per_peer, max_age_s=cfg.swarm.peer_group_max_age_s)
        if cfg.swarm.game == "multistage":
            self.game = build_driver(
                cfg, policy=self.policy, learner=self.learner, exchange=self.swarm,
                chain=self.chain, bus=self.bus, should_stop=self._stop.is_set,
            )
        self.bus.emit(
            NodeStarted(
                peer_id=self.identity.peer_id, peer_name=self.identity.name, swarm_name=cfg.swarm.swarm_name,
                invite=self.swarm.invite(), model=train.model, device=device, hardware=hw.to_dict(),
                run_dir=str(self.run_dir), resumed_from_round=self.last_round, game=cfg.swarm.game,
                swarm_epoch=cfg.swarm.swarm_epoch, round_seconds=cfg.swarm.round_seconds,
            )
        )

    def _reachability_changed(self, verdict, addresses: list[str], local: list[str], *, starting_swarm: bool) -> None:
        """The swarm's reachability verdict (:mod:`node.swarm.reachability`), told to the user; its contacts kept."""
        from node.swarm.reachability import explain

        ports = [int(a.split("/tcp/")[1].split("/")[0]) for a in local + addresses if "/tcp/" in a]
        summary, advice = explain(verdict, starting_swarm=starting_swarm,
                                  port=self.config.swarm.port or (ports[0] if ports else None),
                                  reachable_networks=self.config.swarm.reachable_networks)
        self.bus.emit(ReachabilityChanged(
            status=verdict.status, via=verdict.via, checked=verdict.checked, public_address=verdict.public_ip,
            addresses=addresses, local_addresses=local, client_mode=self.swarm.client_mode, summary=summary,
            advice=advice,
        ))
        self._remember_peers()

    def _remember_peers(self) -> None:
        contacts = getattr(self.swarm, "contacts", None)
        if contacts is not None and self.identity is not None:
            known_peers.save(self.config.run.data_dir, self.config.swarm.swarm_name, contacts(),
                             own_peer_id=self.identity.peer_id)

    def _loop(self) -> None:
        rounds_wanted = self.config.run.rounds
        while not self.stopping and (rounds_wanted is None or self.rounds_trained < rounds_wanted):
            assert self.governor is not None
            if self.governor.check().paused:
                if self.checkpoints.unsaved:  # saved before "paused" is told: paused means safe to quit
                    self._checkpoint("pause")
                self._set_state("paused", self.governor.summary)
            if self.governor.hold(self._stop.wait):
                break
            if not self._resume.is_set():
                if self.checkpoints.unsaved:  # a paused node may be quit, or the computer shut down, any moment
                    self._checkpoint("pause")
                self._set_state("paused")
                self._resume.wait()
                if self.stopping:
                    break
            self._set_state("training")
            if self._evaluation_due():
                self._evaluate()
                continue  # a pause or stop requested during the evaluation takes effect before the round
            started = time.monotonic()
            try:
                outcome = self._game_round() if self.game is not None else self._round(self._next_round())
            except (RoundCancelled, GameCancelled):
                break
            self.checkpoints.round_trained(time.monotonic() - started)
            self.store.append_round(outcome.metrics, outcome.samples)
            for sample in outcome.samples:
                self.bus.emit(sample)
            self.bus.emit(outcome.metrics)
            reason = self._checkpoint_due()
            if reason is not None:
                self._checkpoint(reason)
            allocator.trim_heap()  # the round's freed heap pages go back to the OS: kept RSS is what is in use
        if not self.stopping and self._evaluation_due():  # the run reached its round count: a final evaluation
            self._evaluate()
        if self.checkpoints.unsaved:
            self._checkpoint("stop")
        self._set_state("stopping")

    def _checkpoint_due(self) -> CheckpointReason | None:
        if self._checkpoint_requested.is_set():
            self._checkpoint_requested.clear()
            return "requested"
        if self.uploader is not None and self.uploader.due(self.rounds_trained):
            return "upload"  # an upload reads the latest checkpoint: it must hold the rounds it counts
        return self.checkpoints.due()

    def _next_round(self) -> int:
        """This node's next round: its own count, nothing to agree on with peers (the swarm round it publishes
        under comes from the clock, :mod:`node.clock`). With a chain, the chain's round is read for the rewards."""
        round_ = 0 if self.last_round is None else min(self.last_round + 1, MAX_ROUND)
        if self.chain is not None:
            self._chain_round = self.chain.chain_round()
            if self._chain_round is not None and not 0 <= self._chain_round <= MAX_ROUND:
                log.warning("ignoring the chain's round %d: out of bounds", self._chain_round)
                self._chain_round = None
        return round_

    # --------------------------------------------------------------------------------------------- one round
    def _game_round(self):
        """A round of the multi-stage game (node.game): it follows the swarm's stage clock itself."""
        assert self.game is not None
        outcome = self.game.play_round(self.last_round, self.rounds_trained)
        self.last_round, self.rounds_trained = outcome.metrics.round, outcome.metrics.rounds_trained
        self._track_peers(outcome.metrics.round, set(outcome.peers))
        return outcome

    def _round(self, number: int):
        assert self.parts is not None and self.identity is not None
        outcome = play_round(
            self.parts, number, seed=f"{self.config.run.seed}:{self.tasks.seed}:{number}",
            rounds_trained=self.rounds_trained, should_stop=self._stop.is_set, report=self._report_progress,
        )
        self.rounds_trained += 1
        self.last_round = number
        self._track_peers(number, outcome.peers)
        if self.chain is not None:
            self.chain.round_finished(self._chain_round, outcome.rewards_by_peer[self.identity.peer_id],
                                      outcome.rewards_by_peer)
        return outcome

    # ------------------------------------------------------------------------------------- held-out evaluation
    def _evaluation_due(self) -> bool:
        every = self.config.evaluation.every_rounds
        if self.evaluator is None or not every:
            return False
        done = {e.rounds_trained for e in self.store.evaluations()}
        return self.rounds_trained % every == 0 and self.rounds_trained not in done

    def _evaluate(self) -> None:
        assert self.evaluator is not None
        round_ = self.last_round if self.last_round is not None else 0

        def progress(done: int, total: int) -> None:
            self.bus.emit(RoundProgress(round=round_, phase="evaluating", done=done, total=total,
                                        detail="held-out questions"))

        try:
            evaluation = self.evaluator.run(round=round_, rounds_trained=self.rounds_trained,
                                            should_stop=self._stop.is_set, progress=progress)
        except EvalCancelled:
            return
        result = evaluation.summary
        self.store.append_evaluation(result, evaluation.answers)
        self.bus.emit(result)
        log.info("held-out evaluation after %d rounds: exact %.3f (greedy), %.3f (sampled), score %.3f, "
                 "well-formed %.2f, %.0f s", result.rounds_trained, result.accuracy_greedy, result.exact_mean,
                 result.score_mean, result.wellformed_rate, result.seconds)

    def _track_peers(self, number: int, peers: set[str]) -> None:
        assert self.identity is not None
        for peer in peers - {self.identity.peer_id}:
            if peer not in self._peer_last_seen:
                self.bus.emit(PeerJoined(peer_id=peer, peer_name=peer_name(peer)))
            self._peer_last_seen[peer] = number
        for peer, last in list(self._peer_last_seen.items()):
            if number - last >= PEER_GONE_ROUNDS:
                del self._peer_last_seen[peer]
                self.bus.emit(PeerLeft(peer_id=peer, peer_name=peer_name(peer)))

    def _checkpoint(self, reason: CheckpointReason) -> None:
        if self.last_round is None:
            return
        started = time.perf_counter()
        self.bus.emit(RoundProgress(round=self.last_round, phase="checkpoint"))
        state = CheckpointState(
            round=self.last_round, rounds_trained=self.rounds_trained, global_step=self.learner.global_step,
            model=self.config.training.model, lora_rank=self.config.training.lora_rank,
        )
        path = self.checkpointer.save(self.learner.model, self.policy.tokenizer, self.learner.optimizer, state)
        self.checkpoints.saved()
        self.bus.emit(CheckpointSaved(round=self.last_round, path=str(path), seconds=time.perf_counter() - started,
                                      reason=reason))
        if self.uploader is not None and not self.stopping:
            self.uploader.after_checkpoint(self.rounds_trained)

    def _report_progress(self, progress: RoundProgress) -> None:
        """The round's progress; the wait for peers is over once the round reports any other phase (training), so
        the node's state says so too, not only when the round ends."""
        if self._state == "waiting_for_peers" and progress.phase != "waiting_for_peers":
            self._set_state("training")
        self.bus.emit(progress)

    def _set_state(self, state: NodeState, detail: str = "") -> None:
        if state != self._state:
            self._state = state
            self.bus.emit(StateChanged(state=state, detail=detail))


def task_mix(cfg: NodeConfig, params: int | None) -> TaskMix:
    """The configured families, or the default mix for a model of ``params`` parameters when none are."""
    configured = {family: weight for family, weight in cfg.tasks.weights.items() if weight > 0}
    mix = default_mix(params)
    if not cfg.tasks.weights:
        return mix
    return TaskMix(configured, {family: mix.ladders[family] for family in configured if family in mix.ladders})


def swarm_clock(cfg: NodeConfig) -> SwarmClock:
    return SwarmClock(cfg.swarm.swarm_epoch, cfg.swarm.round_seconds)


def _dht_exchange(cfg: NodeConfig, identity: Identity, initial_peers: list[str]) -> Exchange:
    from node.swarm.dht import DhtExchange  # hivemind loads only for nodes that use the DHT

    return DhtExchange(
        identity, swarm_name=cfg.swarm.swarm_name, initial_peers=initial_peers, host=cfg.swarm.host,
        port=cfg.swarm.port, record_ttl=cfg.swarm.record_ttl_s, call_timeout=cfg.swarm.call_timeout_s,
        groups_wanted=cfg.training.external_groups, max_fetches_per_round=cfg.swarm.max_fetches_per_round,
        directory_shards=cfg.swarm.directory_shards,
        admission_secret=swarm_secret.load(cfg.run.data_dir, cfg.swarm.swarm_name), client_mode=cfg.swarm.client_mode,
        reachability_mode=cfg.swarm.reachability, reachable_networks=cfg.swarm.reachable_networks,
        known_peers=known_peers.load(cfg.run.data_dir, cfg.swarm.swarm_name),
        game=cfg.swarm.game, address_prefixes=(cfg.swarm.address_prefix_v4, cfg.swarm.address_prefix_v6),
    )


def _task_seed(cfg: NodeConfig, peer_id: str) -> int:
    if cfg.tasks.seed is not None:
        return cfg.tasks.seed
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:7], "big")


def pick_sampler(setting: str, model: models.ResolvedModel, *, device: str, generation_dtype: torch.dtype,
                 fit: dict) -> str:
    """What samples this run's completions, for ``training.sampler = setting`` and :func:`models.check_fits`'
    settings ``fit``: ``auto`` is ONNX Runtime where it can run (the policy keeps the torch loop for a model it does
    not run) and where the round's memory estimate with ONNX Runtime's packed copy of the weights still fits, the
    torch loop elsewhere; ``torch`` and ``onnxruntime`` are what they say. ``vllm`` is refused with the fix where it
    cannot run (not on CUDA, or vllm not installed); ``auto`` never picks it (docs/performance.md says why)."""
    if setting == "vllm":
        refused = vllm_decoding.unavailable(device)
        if refused:
            problem, fix = refused
            raise NodeError(f"training.sampler = vllm cannot sample here: {problem}", hint=fix, code="invalid_config")
        return setting
    if setting != "auto":
        return setting
    if not _onnxruntime_samples(device, generation_dtype):
        return "torch"
    if not models.fits(model, **fit, onnxruntime_sampler=True):
        log.info("sampling with torch: ONNX Runtime's copy of the weights would not fit this machine's memory")
        return "torch"
    return "auto"


def _onnxruntime_samples(device: str, generation_dtype: torch.dtype) -> bool:
    """Whether ONNX Runtime can sample here at all: float32 sampling on the CPU, onnxruntime installed (the model's
    architecture is checked after it loads, by the policy)."""
    return device == "cpu" and generation_dtype == torch.float32 and ort_decoding.available()


def _pick_bf16(setting: str, device: str, hw: hardware.HardwareInfo, *, sampling: bool) -> bool:
    if setting != "auto":
        return setting == "bfloat16"
    return hardware.auto_bf16(hw, device, sampling=sampling)


