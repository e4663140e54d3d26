"""``generate()``'s own random draw, for tests that check the decode loops token for token against ``generate()``.

``torch.multinomial(probs, 1)`` draws one sample as ``argmax(probs / noise)`` with ``noise`` exponential, one per row
and vocabulary entry, for the whole batch of sampled rows. Drawn here for every sampled row of the generation,
ended ones included, as ``generate()`` draws it, and used for the live rows' part, the global generator advances
exactly as under ``generate()``: a seeded generation then samples ``generate()``'s completions wherever the logits
agree. The node samples the same distribution with :func:`node.learning.decoding.inverse_cdf`, far cheaper.
"""

from __future__ import annotations

import functools

import torch

from node.learning import decoding, ort_decoding


def multinomial(scores: torch.Tensor, rows: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A :data:`node.learning.decoding.Draw` that draws as ``generate()``."""
    noise = scores.new_empty(batch, scores.shape[-1]).exponential_()
    tokens = (scores.softmax(-1) / (noise if len(rows) == batch else noise[rows])).argmax(-1)
    return tokens, scores.log_softmax(-1).gather(1, tokens[:, None])[:, 0]


def draw_as_generate(monkeypatch) -> None:
    """Make both decode loops draw as ``generate()`` for the rest of the test, whoever calls them."""
    monkeypatch.setattr(decoding, "sample", functools.partial(decoding.sample, draw=multinomial))
    monkeypatch.setattr(ort_decoding, "sample", functools.partial(ort_decoding.sample, draw=multinomial))
