"""The decode loops' draw (:func:`node.learning.decoding.inverse_cdf`): it samples exactly the distribution
``generate()`` samples (softmax after temperature and top-p), over a whole vocabulary, and records each token's
log-prob under it; a token of probability 0 is never drawn and the last one is reachable."""

from __future__ import annotations

import math

import torch

from node.learning import decoding

VOCAB = 49_152  # the bundled model's


def _chi_square_bound(df: int, z: float = 5.0) -> float:
    """The chi-square value that ``df`` degrees of freedom exceed with probability ~3e-7 (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _expected(logits: list[float], temperature: float, top_p: float) -> torch.Tensor:
    """The distribution ``generate()`` samples from, computed here by hand: softmax at the temperature, then only
    the most likely tokens whose probabilities reach ``top_p``, renormalized."""
    probs = torch.tensor(logits, dtype=torch.float64).div(temperature).softmax(-1)
    kept, mass = [], 0.0
    for token in probs.argsort(descending=True).tolist():
        if mass >= top_p:
            break
        kept.append(token)
        mass += float(probs[token])
    cut = torch.zeros_like(probs)
    cut[kept] = probs[kept]
    return cut / cut.sum()


def test_the_draw_samples_the_warped_softmax():
    """200,000 draws through the loop's step (warpers, then the draw) against the distribution computed by hand:
    chi-square within its 3e-7 tail, and the tokens top-p cuts or that have no probability never drawn. Ignoring the
    temperature, cutting one token too many or too few, or searching one token off each fail it."""
    logits = [-math.inf, 2.0, 0.5, -1.0, 1.0, -math.inf, 0.0, 1.5, -2.0, 0.2]
    temperature, top_p, draws = 0.7, 0.93, 200_000
    expected = _expected(logits, temperature, top_p)
    assert 0 < int((expected == 0).sum()) - 2 < len(logits) - 2  # top-p cuts some tokens here, not all
    torch.manual_seed(0)
    scores = torch.tensor(logits).expand(draws, -1).clone()
    rows = torch.arange(draws)
    tokens, logprobs = decoding.choose(scores, decoding.warpers_for(temperature, top_p), rows, drawing_rows=draws,
                                       batch=draws, draw=decoding.inverse_cdf)
    counts = torch.bincount(tokens, minlength=len(logits)).double()
    assert counts[expected == 0].sum() == 0
    kept = expected > 0
    chi_square = float(((counts[kept] - draws * expected[kept]) ** 2 / (draws * expected[kept])).sum())
    assert chi_square < _chi_square_bound(int(kept.sum()) - 1)
    torch.testing.assert_close(logprobs, expected.log().float()[tokens], atol=1e-5, rtol=0)


def test_every_token_of_a_whole_vocabulary_is_drawn_at_its_own_probability_and_none_without_one():
    """Over 49,152 tokens, one very likely and the rest each under a float32 rounding step of the running sum: a
    uniform in the middle of any token's share of the cumulative distribution (computed here in float64, over the
    whole row) draws that token, at the edges of the draw's blocks, the last token included; tokens of probability 0
    (a whole first block, the first after it, a run, the last) are never drawn, not even by the lowest or the
    highest uniform. A float32 running sum gives tiny tokens no share or the neighbour's;
    searching for the first sum at or above the uniform draws a zero-probability token; a block off by one, or a
    block's share not taken off the uniform, draws other tokens."""
    scores = torch.full((VOCAB,), -17.0)
    block = decoding.BLOCK
    scores[:block] = -math.inf  # the first block, whole
    scores[[block, 5000, 5001, 5002, VOCAB - 1]] = -math.inf
    scores[block + 7] = 0.0
    probs = scores.double().softmax(-1)
    share_ends = probs.cumsum(-1)
    share_starts = share_ends - probs
    tokens = torch.tensor([block + 1, block + 6, block + 7, block + 8, 2 * block - 1, 2 * block, 4999, 5003, 20_000,
                           VOCAB - 3, VOCAB - 2])
    assert int((probs[tokens] < 2**-24).sum()) == len(tokens) - 1  # all but one under half a float32 step
    uniforms = ((share_starts[tokens] + share_ends[tokens]) / 2)[:, None]
    rows = scores.expand(len(tokens) + 2, -1)
    lowest, highest = torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([[1 - 2**-53]], dtype=torch.float64)
    drawn, logprobs = decoding.inverse_cdf_at(rows, torch.cat([uniforms, lowest, highest]))
    assert drawn.tolist() == [*tokens.tolist(), block + 1, VOCAB - 2]
    torch.testing.assert_close(logprobs[: len(tokens)].double(), probs[tokens].log(), atol=1e-5, rtol=0)
