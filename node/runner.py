"""A swarm participant: set-up, the SAPO round loop, and pause / resume / stop.

One round: sample I local questions -> generate G completions each in one batched call -> publish the groups ->
gather peers' groups until J usable ones arrived or the deadline passed -> verify and score everything with our
own verifier -> one GRPO update -> persist metrics and samples -> checkpoint every N rounds.
Everything the outside world learns goes through typed events (:mod:`node.events`).
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections import Counter

import torch

from node import hardware, limits, models
from node.auto_upload import AutoUploader
from node.checkpoint import Checkpointer, CheckpointState
from node.config import NodeConfig
from node.errors import NodeError
from node.events import (
    CheckpointSaved, EventBus, NodeFailed, NodeStarted, NodeState, PeerJoined, PeerLeft, RolloutSample,
    RoundMetrics, StateChanged,
)
from node.game.driver import GameCancelled, GameDriver, build_driver
from node.grpo import Completion, GrpoLearner, Policy, TrainGroup
from node.identity import Identity, load_or_create, peer_name
from node.records import RoundRecord, SharedGroup
from node.runstore import RunStore
from node.sapo import PeerGroup, select_external, verify_records
from node.swarm import Swarm
from node.tasks import Task, TaskSource, build_messages, score

log = logging.getLogger(__name__)

SAMPLE_TEXT_CHARS = 2000  # rollout samples are for reading, not for training
PEER_GONE_ROUNDS = 3  # a peer unseen this many rounds counts as left
GATHER_POLL_S = 1.0


class _RoundCancelled(Exception):
    """Stop was requested while the round's completions were being generated."""


class SwarmNode:
    """Runs rounds until the configured count is reached or :meth:`stop` is called.

    :meth:`pause`, :meth:`resume` and :meth:`stop` are thread-safe and take effect between rounds (a stop also
    cuts short the wait for peers). :meth:`run` blocks; the swarm is always shut down when it returns.
    """

    def __init__(self, config: NodeConfig, *, bus: EventBus | None = None) -> None:
        self.config = config
        self.bus = bus or EventBus()
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._state: NodeState | None = None
        self.swarm: Swarm | None = None
        self.identity: Identity | None = None
        self.chain = None  # ChainParticipant when a chain is configured
        self._chain_round: int | None = None  # the chain's round when the current training round began
        self._peer_last_seen: dict[str, int] = {}
        self.uploader: AutoUploader | None = None
        self.game: GameDriver | None = None  # set up when the swarm plays the multi-stage game

    # ----------------------------------------------------------------------------------------------- controls
    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        self._stop.set()
        self._resume.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------------------------------------ running
    def run(self) -> None:
        self._set_state("starting")
        try:
            self._setup()
            self._loop()
        except NodeError as exc:
            self.bus.emit(NodeFailed(message=exc.message, hint=exc.hint, fatal=True))
            self._set_state("error", exc.message)
            raise
        except Exception as exc:
            log.exception("node crashed")
            self.bus.emit(NodeFailed(message=f"node crashed: {exc!r}", hint="see the node log", fatal=True))
            self._set_state("error", repr(exc))
            raise
        finally:
            if self.chain is not None:
                self.chain.stop()
            if self.uploader is not None:
                self.uploader.close(should_cancel=lambda: self.stopping or self._state == "error")
            if self.swarm is not None:
                self.swarm.shutdown()
        self._set_state("stopped")

    def _setup(self) -> None:
        cfg = self.config
        train = cfg.training
        hw = hardware.detect()
        device = hw.kind if train.device == "auto" else train.device
        if device != "cpu" and device != hw.kind:
            raise NodeError(f"device {device!r} is not available here ({hw.describe()})", hint="use --device auto")
        applied = limits.apply_resource_limits(
            threads=cfg.run.threads, gpu_memory_fraction=cfg.run.gpu_memory_fraction, device=device
        )
        log.info("hardware: %s; limits: %s", hw.describe(), applied)
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
        self.tasks = TaskSource(
            train_weights(cfg), seed=_task_seed(cfg, self.identity.peer_id), configs=cfg.tasks.configs
        )

        resolved = models.resolve(train.model)
        groups = train.local_questions + train.external_groups
        per_pass = min(train.micro_batch_groups or groups, groups) * train.num_generations
        available = hw.gpus[0].total_memory_bytes if device == "cuda" else hw.available_ram_bytes
        models.check_fits(
            resolved, available_bytes=available, train_dtype="bfloat16" if mixed_bf16 else "float32",
            num_sequences=per_pass,
            seq_len=min(train.max_prompt_tokens, hardware.PROMPT_TOKENS) + train.max_new_tokens,
        )
        self.checkpointer = Checkpointer(self.run_dir / "checkpoints")
        latest = self.checkpointer.latest()
        if latest is not None and latest[1].model != train.model:
            raise NodeError(
                f"the run {cfg.run.run_name!r} was trained from {latest[1].model!r}, not {train.model!r}",
                hint="pick another run name (--run-name) to start a new run with this model",
            )
        source = models.ResolvedModel(
            ref=train.model, kind="local_dir", path_or_id=str(latest[0] / "model"), gguf_file=None, params=None
        ) if latest else resolved
        model, tokenizer = models.load(source, cache_dir=cfg.model_cache_dir, dtype=torch.float32, device=device)
        self.policy = Policy(model, tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=train.max_prompt_tokens)
        self.learner = GrpoLearner(
            self.policy, output_dir=self.run_dir / "trl", device=device, mixed_bf16=mixed_bf16,
            num_generations=train.num_generations, max_new_tokens=train.max_new_tokens,
            learning_rate=train.learning_rate, beta=train.beta, epsilon=train.epsilon,
            epsilon_high=train.epsilon_high, loss_type=train.loss_type, max_grad_norm=train.max_grad_norm,
            seed=cfg.run.seed, micro_batch_groups=train.micro_batch_groups,
        )
        if latest:
            folder, state = latest
            self.checkpointer.load_optimizer(folder, self.learner.optimizer)
            self.learner.global_step = state.global_step
            self.last_round: int | None = state.round
            self.rounds_trained = state.rounds_trained
            log.info("resumed from the checkpoint of round %d (%d rounds trained)", state.round, state.rounds_trained)
        else:
            self.last_round = None
            self.rounds_trained = 0
        self.store.truncate_after(self.last_round)
        self.uploader = AutoUploader(cfg, self.bus, rounds_trained=self.rounds_trained)

        self.swarm = Swarm(
            self.identity, swarm_name=cfg.swarm.swarm_name, initial_peers=initial_peers,
            host=cfg.swarm.host, port=cfg.swarm.port, record_ttl=cfg.swarm.record_ttl_s,
            call_timeout=cfg.swarm.call_timeout_s,
        )
        self.swarm.start()
        if cfg.swarm.game == "multistage":
            self.game = build_driver(
                cfg, policy=self.policy, learner=self.learner, swarm=self.swarm, chain=self.chain, bus=self.bus,
                should_stop=self._stop.is_set,
            )
        self.bus.emit(
            NodeStarted(
                peer_id=self.identity.peer_id, peer_name=self.identity.name, swarm_name=cfg.swarm.swarm_name,
                invite=self.swarm.invite(), model=train.model, device=device, hardware=hw.to_dict(),
                run_dir=str(self.run_dir), resumed_from_round=self.last_round, game=cfg.swarm.game,
            )
        )

    def _loop(self) -> None:
        rounds_wanted = self.config.run.rounds
        since_checkpoint = 0
        while not self.stopping and (rounds_wanted is None or self.rounds_trained < rounds_wanted):
            if not self._resume.is_set():
                self._set_state("paused")
                self._resume.wait()
                if self.stopping:
                    break
            self._set_state("training")
            try:
                if self.game is not None:
                    metrics, samples = self.game.play_round(self.last_round, self.rounds_trained)
                    self.last_round, self.rounds_trained = metrics.round, metrics.rounds_trained
                    self._track_peers(metrics.round, set(self.game.last_peers))
                else:
                    metrics, samples = self._round(self._next_round())
            except (_RoundCancelled, GameCancelled):
                break
            self.store.append_round(metrics, samples)
            for sample in samples:
                self.bus.emit(sample)
            self.bus.emit(metrics)
            since_checkpoint += 1
            if since_checkpoint >= self.config.run.checkpoint_every:
                self._checkpoint()
                since_checkpoint = 0
        if since_checkpoint:
            self._checkpoint()
        self._set_state("stopping")

    def _next_round(self) -> int:
        """Follow the highest round announced in the swarm, so late joiners catch up and nobody falls behind."""
        assert self.swarm is not None
        round_ = 0 if self.last_round is None else self.last_round + 1
        announced = self.swarm.swarm_round()
        if announced is not None and announced > round_:
            log.info("catching up with the swarm: round %d -> %d", round_, announced)
            round_ = announced
        if self.chain is not None:
            self._chain_round = self.chain.chain_round()
            if self.config.chain.follow_round and self._chain_round is not None and self._chain_round > round_:
                log.info("following the chain: round %d -> %d", round_, self._chain_round)
                round_ = self._chain_round
        self.swarm.announce_round(round_)
        return round_

    # --------------------------------------------------------------------------------------------- one round
    def _round(self, number: int) -> tuple[RoundMetrics, list[RolloutSample]]:
        train = self.config.training
        started = time.perf_counter()
        rng = random.Random(f"{self.config.run.seed}:{self.tasks.seed}:{number}")

        t0 = time.perf_counter()
        local = self._generate(number, rng)
        seconds_generate = time.perf_counter() - t0
        if self.stopping:  # generation was cut short: nothing of this round is trained or shared
            raise _RoundCancelled
        tokens = sum(len(c.ids) for _, _, completions in local for c in completions)

        t0 = time.perf_counter()
        shared = self._publish(number, local)
        seconds_share = time.perf_counter() - t0

        t0 = time.perf_counter()
        external, received, rejected, zero_dropped, peers = self._gather(number, rng)
        seconds_gather = time.perf_counter() - t0

        local_rewards = [[self._score(task, c.text) for c in completions] for task, _, completions in local]
        groups = [
            TrainGroup(prompt_ids=prompt, completions=tuple(completions), rewards=tuple(rewards))
            for (_, prompt, completions), rewards in zip(local, local_rewards, strict=True)
        ]
        for group in external:
            prompt = self.policy.prompt_ids(build_messages(group.task.question))
            completions = tuple(
                self.policy.encode_completion(text, finished=finished, max_new_tokens=train.max_new_tokens)
                for text, finished in zip(group.texts, group.finished, strict=True)
            )
            groups.append(TrainGroup(prompt_ids=prompt, completions=completions, rewards=group.rewards))

        stats = self.learner.step(groups)
        self.rounds_trained += 1
        self.last_round = number

        flat_local = [r for rewards in local_rewards for r in rewards]
        flat_external = [r for group in external for r in group.rewards]
        metrics = RoundMetrics(
            round=number,
            rounds_trained=self.rounds_trained,
            reward_local=_avg(flat_local),
            reward_external=_avg(flat_external) if flat_external else None,
            reward_train=_avg(flat_local + flat_external),
            loss=stats.loss,
            kl=stats.kl,
            completion_length=stats.completion_length,
            tokens_generated=tokens,
            generation_tokens_per_s=tokens / seconds_generate if seconds_generate > 0 else 0.0,
            seconds_generate=seconds_generate,
            seconds_share=seconds_share,
            seconds_gather=seconds_gather,
            seconds_train=stats.seconds,
            seconds_total=time.perf_counter() - started,
            peers_seen=len(peers),
            groups_shared=shared,
            groups_received=received,
            groups_used=len(external),
            groups_zero_advantage=zero_dropped,
            groups_rejected=sum(rejected.values()),
            rejected_reasons=dict(rejected),
        )
        samples = self._samples(number, local, local_rewards, external)
        self._track_peers(number, peers)
        if self.chain is not None:
            scores: dict[str, list[float]] = {self.identity.peer_id: flat_local}
            for group in external:
                scores.setdefault(group.peer_id, []).extend(group.rewards)
            self.chain.round_finished(self._chain_round, flat_local, scores)
        return metrics, samples

    def _generate(self, number: int, rng: random.Random) -> list[tuple[Task, tuple[int, ...], list[Completion]]]:
        train = self.config.training
        tasks = self.tasks.sample(train.local_questions, rng)
        prompts = [self.policy.prompt_ids(build_messages(task.question)) for task in tasks]
        groups = self.policy.generate(
            prompts, num_generations=train.num_generations, max_new_tokens=train.max_new_tokens,
            temperature=train.temperature, top_p=train.top_p, seed=rng.getrandbits(63),
            should_stop=self._stop.is_set,
        )
        return list(zip(tasks, prompts, groups, strict=True))

    def _publish(self, number: int, local) -> int:
        assert self.swarm is not None and self.identity is not None
        record = RoundRecord(
            peer_id=self.identity.peer_id,
            round=number,
            groups=tuple(
                SharedGroup(
                    task=task.ref, question=task.question, completions=tuple(c.text for c in completions),
                    finished=tuple(c.finished for c in completions),
                )
                for task, _, completions in local
            ),
        )
        return len(record.groups) if self.swarm.publish(record) else 0

    def _gather(self, number: int, rng: random.Random):
        """Collect peer groups of this round and the previous one until J are usable or the deadline passes."""
        assert self.swarm is not None
        train = self.config.training
        wanted = train.external_groups
        deadline = time.monotonic() + self.config.swarm.gather_timeout_s
        verified: dict[tuple[str, int], list[PeerGroup]] = {}
        rejected: Counter[str] = Counter()  # groups that failed our checks, each record verified once
        undecodable: dict[int, Counter[str]] = {}  # records the swarm layer refused, as of the latest poll
        peers: set[str] = set()
        waiting = False
        while True:
            for round_ in (number, number - 1) if number > 0 else (number,):
                result = self.swarm.gather(round_)
                peers |= result.peers
                undecodable[round_] = result.rejected
                for record in result.records:
                    if (record.peer_id, record.round) in verified:
                        continue
                    verification = verify_records(
                        [record], self.tasks, num_generations=train.num_generations, scorer=self._score
                    )
                    verified[(record.peer_id, record.round)] = verification.accepted
                    rejected.update(verification.rejected)
            candidates = [group for groups in verified.values() for group in groups]
            usable = [g for g in candidates if not (train.drop_zero_advantage and g.zero_advantage)]
            if (
                wanted == 0
                or len(usable) >= wanted
                or time.monotonic() >= deadline
                or self.stopping
                or (self.swarm.peers_seen() == 0 and self.swarm.connected_peers() == 0)  # alone: train solo
            ):
                break
            if not waiting:
                self._set_state("waiting_for_peers", f"{len(usable)}/{wanted} peer groups")
                waiting = True
            self._stop.wait(GATHER_POLL_S)
        if waiting:
            self._set_state("training")
        chosen, zero_dropped = select_external(
            candidates, wanted, rng, current_round=number, drop_zero_advantage=train.drop_zero_advantage
        )
        for counts in undecodable.values():
            rejected.update(counts)
        received = len(candidates) + sum(rejected.values())
        return chosen, received, rejected, zero_dropped, peers

    def _score(self, task: Task, text: str) -> float:
        return score(task, text, format_weight=self.config.training.format_reward_weight)

    def _samples(self, number, local, local_rewards, external: list[PeerGroup]) -> list[RolloutSample]:
        assert self.identity is not None
        samples = []
        for (task, _, completions), rewards in zip(local, local_rewards, strict=True):
            best = max(range(len(completions)), key=rewards.__getitem__)
            samples.append(self._sample(number, self.identity.peer_id, True, task, completions[best].text, rewards[best]))
        for group in external:
            best = max(range(len(group.texts)), key=group.rewards.__getitem__)
            samples.append(self._sample(number, group.peer_id, False, group.task, group.texts[best], group.rewards[best]))
        return samples

    def _sample(self, number, peer_id, is_local, task: Task, text: str, reward: float) -> RolloutSample:
        return RolloutSample(
            round=number, source_peer=peer_id, source_name=peer_name(peer_id), local=is_local,
            family=task.ref.family, question=task.question[:SAMPLE_TEXT_CHARS],
            completion=text[:SAMPLE_TEXT_CHARS], reward=reward,
        )

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

    def _checkpoint(self) -> None:
        if self.last_round is None:
            return
        started = time.perf_counter()
        state = CheckpointState(
            round=self.last_round, rounds_trained=self.rounds_trained, global_step=self.learner.global_step,
            model=self.config.training.model,
        )
        path = self.checkpointer.save(self.policy.model, self.policy.tokenizer, self.learner.optimizer, state)
        self.bus.emit(CheckpointSaved(round=self.last_round, path=str(path), seconds=time.perf_counter() - started))
        if self.uploader is not None and not self.stopping:
            self.uploader.after_checkpoint(self.rounds_trained)

    def _set_state(self, state: NodeState, detail: str = "") -> None:
        if state != self._state:
            self._state = state
            self.bus.emit(StateChanged(state=state, detail=detail))


def train_weights(cfg: NodeConfig) -> dict[str, float]:
    return {family: weight for family, weight in cfg.tasks.weights.items() if weight > 0}


def _task_seed(cfg: NodeConfig, peer_id: str) -> int:
    if cfg.tasks.seed is not None:
        return cfg.tasks.seed
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:7], "big")


def _pick_bf16(setting: str, device: str, hw: hardware.HardwareInfo, *, sampling: bool) -> bool:
    if setting != "auto":
        return setting == "bfloat16"
    return hardware.auto_bf16(hw, device, sampling=sampling)


def _avg(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
