"""The held-out evaluation's shared prefix: the tokens every evaluation prompt starts with run once per evaluation,
and each chunk copies their keys and values into every row (:meth:`Policy.prefill`, ``decoding.sample(prefix=)``).
The answers are today's: greedy and sampled, prompts whose own parts differ in length (so padding sits between
the prefix and the rest), rows ending at different steps, float32 and the bfloat16 sampling copy; and the prefix
really is not run again."""

from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch

from node.learning import evaluation, ort_decoding
from node.learning.decoding import shared_prefix
from node.learning.evaluation import EvalSettings, Evaluator
from node.learning.grpo import Policy, padded_width
from node.tasks.curriculum import default_mix
from node.tasks.source import TaskSource
from tests.generate_draw import draw_as_generate
from tests.test_generate_prompt_once import G, MAX_NEW_TOKENS, _Embedded, _end_mid_completion, _policy


@pytest.fixture(autouse=True)
def _draw_as_generate(monkeypatch):
    """The comparisons here are token for token between batches of other shapes: they draw as ``generate()`` does
    (:mod:`tests.generate_draw`), which float32 rounding of another shape moves far more rarely than it moves the
    node's inverse-CDF draw."""
    draw_as_generate(monkeypatch)


def _tasks() -> TaskSource:
    mix = default_mix(135_000_000)  # the bundled model's families and ladders
    return TaskSource(mix.weights, seed=3, ladders=mix.ladders)


def _prompts(policy: Policy, n: int = 5) -> list[tuple[int, ...]]:
    tasks = _tasks()
    return [policy.prompt_ids(tasks.messages(task)) for task in tasks.evaluation_set(n, levels=2)]


def _suffix_lengths(prompts, prefix) -> set[int]:
    return {len(p) - len(prefix) for p in prompts}


def _width(prompts, prefix) -> int:
    """The width of the prompts' own parts as one batch after a copied prefix: padded as the whole prompts would be."""
    return padded_width(max(map(len, prompts))) - len(prefix)


def test_the_shared_prefix_is_read_from_the_token_ids():
    assert shared_prefix([(1, 2, 3, 4), (1, 2, 3, 5, 6), (1, 2, 7)]) == (1, 2)
    assert shared_prefix([(1, 2, 3), (1, 2, 3, 4)]) == (1, 2)  # each prompt keeps a token to start decoding from
    assert shared_prefix([(1, 2), (3, 2)]) == ()
    assert shared_prefix([(5, 6, 7)]) == (5, 6)


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_copied_prefix_answers_what_the_whole_prompts_answer(tiny_model_dir, dtype, greedy):
    policy = _policy(tiny_model_dir, dtype)
    prompts = _prompts(policy)
    shared = shared_prefix(prompts)
    assert len(shared) >= evaluation.MIN_SHARED_PREFIX and len(_suffix_lengths(prompts, shared)) > 2
    _end_mid_completion(policy, prompts, greedy=greedy)
    kwargs = {"num_generations": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0, "seed": 7,
              "greedy": greedy}
    prefix = policy.prefill(shared)
    embedded = _Embedded(policy.model)
    try:
        groups = policy.generate(prompts, prefix=prefix, **kwargs)
    finally:
        embedded.remove()
    assert groups == policy.generate(prompts, **kwargs)
    assert {c.finished for group in groups for c in group} == {True, False}  # rows ended at different steps
    # only each prompt's own part ran (but its last token), then one token a row
    assert embedded.shapes[0] == (len(prompts), _width(prompts, shared) - 1)
    assert embedded.shapes[1] == (len(prompts) * G, 1)
    if greedy:
        assert len({group[0].ids for group in groups}) == len(prompts)  # the context mattered


def test_greedy_and_sampled_answers_from_a_copied_prefix_are_today_s(tiny_model_dir):
    policy = _policy(tiny_model_dir, torch.float32)
    prompts = _prompts(policy)
    kwargs = {"samples": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0, "seed": 5}
    with_prefix = policy.greedy_and_sampled(prompts, prefix=policy.prefill(shared_prefix(prompts)), **kwargs)
    assert with_prefix == policy.greedy_and_sampled(prompts, **kwargs)
    assert len({c.ids for group in with_prefix[1] for c in group}) > len(prompts)  # sampled, not repeated


def test_a_prompt_without_the_prefix_is_refused(tiny_model_dir):
    policy = _policy(tiny_model_dir, torch.float32)
    prompts = _prompts(policy, 2)
    prefix = policy.prefill(prompts[0][:20])
    with pytest.raises(ValueError, match="start with the prefix"):
        policy.generate([prompts[0], (7, *prompts[1])], num_generations=1, max_new_tokens=2, temperature=1.0,
                        top_p=1.0, seed=0, greedy=True, prefix=prefix)


class _Recording:
    """What the policy's generate() calls return, in order, until :meth:`remove`."""

    def __init__(self, policy: Policy) -> None:
        self.answers: list = []
        self._policy = policy
        generate = policy.generate

        def recording(*args, **kwargs):
            groups = generate(*args, **kwargs)
            self.answers.append(groups)
            return groups

        policy.generate = recording

    def remove(self) -> None:
        del self._policy.generate


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_evaluation_runs_the_shared_prefix_once_and_answers_as_before(tiny_model_dir, dtype):
    """40 questions, three chunks: the prefix runs once (one forward of one row), every chunk runs only its
    prompts' own parts, and the greedy answers are those of the evaluation that runs every whole prompt."""
    settings = EvalSettings(questions=40, max_new_tokens=6)
    policy = _policy(tiny_model_dir, dtype)
    evaluator = Evaluator(policy, _tasks(), settings)
    shared = shared_prefix(evaluator._prompts)
    assert len(shared) >= evaluation.MIN_SHARED_PREFIX
    recording, embedded = _Recording(policy), _Embedded(policy.model)
    try:
        with mock.patch.object(evaluation, "CHUNK_ROWS", 16):
            result = evaluator.run(round=0, rounds_trained=0).summary
    finally:
        embedded.remove()
        recording.remove()
    assert result.questions == 40
    prefills = [shape for shape in embedded.shapes if shape[1] > 1]
    assert prefills[0] == (1, len(shared))  # the prefix, once
    chunks = [evaluator._prompts[start : start + 16] for start in range(0, 40, 16)]
    assert prefills[1:] == [(len(chunk), _width(chunk, shared) - 1) for chunk in chunks]

    with (mock.patch.object(evaluation, "MIN_SHARED_PREFIX", len(shared) + 1),  # every whole prompt
          mock.patch.object(evaluation, "CHUNK_ROWS", 16)):
        whole = Evaluator(policy, _tasks(), settings)
        before, embedded = _Recording(policy), _Embedded(policy.model)
        try:
            whole.run(round=0, rounds_trained=0)
        finally:
            embedded.remove()
            before.remove()
    assert (1, len(shared)) not in embedded.shapes
    assert before.answers == recording.answers
    assert len({c.ids for groups in before.answers for group in groups for c in group}) > 1


def test_a_sampler_that_would_not_use_a_prefix_gets_none(tiny_model_dir):
    """Models on generate() and the ONNX Runtime sampler keep their own prefill: no prefix is computed for them."""
    policy = _policy(tiny_model_dir, torch.float32)
    policy.preallocated_cache = False
    assert policy.prefill(_prompts(policy, 2)[0][:20]) is None
    policy.preallocated_cache = True
    assert policy.prefill(_prompts(policy, 2)[0][:20]) is not None
    if ort_decoding.available():
        policy.sampler = "onnxruntime"
        assert policy.prefill(_prompts(policy, 2)[0][:20]) is None


@pytest.mark.parametrize(("samples", "batches"), [(0, [48, 12]), (1, [24, 24, 12]), (2, [16, 16, 16, 12])])
def test_an_evaluation_fills_each_batch_up_to_its_rows(tiny_model_dir, samples, batches):
    """A batch takes as many questions as fit CHUNK_ROWS rows (each question's greedy row and its sampled ones):
    every question once, in order, and no batch wider than the demo's evaluation's (16 questions, 2 samples each)."""
    policy = _policy(tiny_model_dir, torch.float32)
    evaluator = Evaluator(policy, _tasks(), EvalSettings(questions=60, samples=samples, max_new_tokens=2))
    calls: list[list[tuple[int, ...]]] = []
    name = "greedy_and_sampled" if samples else "generate"
    answer = getattr(policy, name)

    def recording(prompts, **kwargs):
        calls.append(list(prompts))
        return answer(prompts, **kwargs)

    with mock.patch.object(policy, name, recording):
        progress: list[int] = []
        evaluator.run(round=0, rounds_trained=0, progress=lambda done, total: progress.append(done))
    assert evaluation.CHUNK_ROWS == 48
    assert [len(call) for call in calls] == batches
    assert [p for call in calls for p in call] == evaluator._prompts
    assert progress == [0, *itertools.accumulate(batches)]
