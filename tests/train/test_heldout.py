"""Held-out acceptance of a feature draft: the teacher-forced figure drafted q positions ahead is the
overlap of the target with the draft as it decodes q positions ahead, at every answer position."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from draftverify.formulas import overlap
from draftverify.train import heldout
from draftverify.train.feature_draft import residual_streams
from draftverify.train.heldout import (HeldoutSettings, ahead_acceptance, engine_acceptance, engine_runs, fit_temperature,
                                      set_output_temperature, source_acceptance, step_start_acceptance, step_starts)
from tests.factories import tiny_feature_pair

VOCAB = 11
SUBSET = torch.tensor([0, 2, 3, 5, 7, 8, 10])
TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 0, 7]
PROMPT = 4  # tokens of the prompt; the rest is the answer


def _decoding_draft_probs(target, draft, position: int, ahead: int) -> torch.Tensor:
    """The draft's law at ``position`` (predicting the token after it) when it drafts ``ahead``
    positions after the target's last scored one, as the engine runs it."""
    tokens = torch.tensor([TOKENS])
    target_cache = target.new_cache(1)
    target.forward(target_cache, tokens[:, : position - ahead])
    cache = draft.new_cache(1, target_cache)
    logits = draft.forward(cache, tokens[:, : position - ahead + 1])
    for i in range(position - ahead + 1, position + 1):
        logits = draft.forward(cache, tokens[:, i: i + 1])
    return torch.softmax(logits[0, -1].double(), -1)


@pytest.mark.parametrize("fusion", [(), (1,)])
def test_teacher_forced_acceptance_drafted_ahead_is_the_decoding_drafts_overlap_at_every_position(fusion):
    target, draft = tiny_feature_pair(VOCAB, SUBSET, fusion=fusion)
    values = ahead_acceptance(target, draft.head_module, TOKENS[:PROMPT], TOKENS[PROMPT:], 3)
    answer = len(TOKENS) - PROMPT
    assert [len(v) for v in values] == [answer, answer - 1, answer - 2]  # q ahead: the first q positions cannot be
    with torch.no_grad():
        target_probs = torch.softmax(target.model(input_ids=torch.tensor([TOKENS])).logits[0].double(), -1)
    for ahead, row in enumerate(values):
        positions = range(PROMPT - 1 + ahead, len(TOKENS) - 1)
        expected = torch.stack([overlap(target_probs[j], _decoding_draft_probs(target, draft, j, ahead)) for j in positions])
        torch.testing.assert_close(row, expected, atol=2e-3, rtol=0)
    assert not torch.allclose(values[0][1:], values[1], atol=2e-3)  # drafting ahead changes the figure: q is told apart


def test_engine_acceptance_counts_each_drafted_position_at_most_as_often_as_the_one_before():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    settings = HeldoutSettings(tokens=12, draft_length=3)
    figures = engine_acceptance(engine_runs(target, draft, [TOKENS[:PROMPT], TOKENS[:PROMPT + 2]], settings), 3)
    shares = figures["accepted_at"]
    assert len(shares) == 3 and all(0 <= b <= a <= 1 for a, b in zip(shares, shares[1:]))
    assert figures["steps"] >= 2 * 12 // 4  # at most L + 1 tokens a drafting step
    assert 1 <= figures["tokens_per_call"] <= 4


def test_engine_acceptance_and_the_summaries_by_hand():
    """Tokens per target call count every step's calls (a drafting step may make more than one), the
    shares count drafting steps only; a summary's standard error is the sample deviation over the
    square root of the count."""
    from draftverify.train.heldout import _summary

    steps = [SimpleNamespace(committed=1, target_calls=1, drafted=0, accepted=0),
             SimpleNamespace(committed=3, target_calls=1, drafted=3, accepted=2),
             SimpleNamespace(committed=1, target_calls=2, drafted=3, accepted=0)]
    figures = engine_acceptance([SimpleNamespace(steps=steps)], 3)
    assert figures == {"accepted_at": [0.5, 0.5, 0.0], "tokens_per_call": 5 / 4, "steps": 2}
    summary = _summary(torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert summary["mean"] == 0.5 and summary["positions"] == 4
    assert summary["stderr"] == pytest.approx((1 / 3) ** 0.5 / 2)  # sample deviation sqrt(1/3), over sqrt(4)


def test_a_step_starts_where_its_first_token_is_predicted_and_every_draft_is_scored_there():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    runs = engine_runs(target, draft, [TOKENS[:PROMPT]], HeldoutSettings(tokens=16, draft_length=3))
    result = runs[0]
    starts = step_starts(result)
    drafting = [s for s in result.steps if s.drafted]
    assert result.steps[0].drafted == 0 and result.steps[0].committed == 1  # the first step: the target's alone
    assert len(starts) == len(drafting) and starts[0] == PROMPT
    committed = [s.committed for s in drafting][:-1]
    assert [b - a for a, b in zip(starts, starts[1:])] == committed  # a step starts where the one before ended
    figures = step_start_acceptance(target, {"draft": draft.head_module}, runs, 2)["draft"]
    values = ahead_acceptance(target, draft.head_module, result.prompt_ids, result.tokens, 2)
    first = [float(values[0][s - PROMPT + 1]) for s in starts]
    both = [(float(values[0][s - PROMPT + 1]), float(values[1][s - PROMPT + 1])) for s in starts
            if s - PROMPT + 1 < len(values[1])]
    assert figures["starts"] == len(starts) and figures["ahead"][0] == pytest.approx(sum(first) / len(first))
    assert figures["expected_accepted"] == pytest.approx(sum(a + a * b for a, b in both) / len(both))


def test_the_fitted_temperature_is_the_best_candidate_and_folding_it_in_divides_the_logits():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    head = draft.head_module
    sequences = [(TOKENS[:PROMPT], TOKENS[PROMPT:]), (TOKENS[:2], TOKENS[2:7])]
    candidates = (0.5, 0.7, 1.0, 1.4, 2.0)
    fit = fit_temperature(target, head, *zip(*sequences), ahead=2, candidates=candidates)
    for tau in candidates:  # each candidate's figure is the acceptance of the head with its output divided by tau
        scaled = copy.deepcopy(head)
        set_output_temperature(scaled, tau)
        per_q = [torch.cat(v) for v in zip(*(ahead_acceptance(target, scaled, p, a, 2) for p, a in sequences))]
        assert fit["acceptance"][str(tau)] == pytest.approx([float(v.mean()) for v in per_q], abs=1e-5)
    means = {tau: sum(v) / 2 for tau, v in fit["acceptance"].items()}
    assert fit["temperature"] != 1.0 and means[str(fit["temperature"])] == max(means.values())  # this random head: not calibrated
    chosen = fit["temperature"]
    set_output_temperature(head, chosen)  # the same laws again at candidates / chosen: 1 is now the best
    again = fit_temperature(target, head, *zip(*sequences), ahead=2, candidates=[tau / chosen for tau in candidates])
    assert again["temperature"] == 1.0
    assert sum(again["acceptance"].values(), []) == pytest.approx(sum(fit["acceptance"].values(), []), abs=1e-4)
    with pytest.raises(ValueError, match="temperature"):
        set_output_temperature(head, 0.0)


@pytest.mark.parametrize("bad", [dict(chat=0, humaneval=0), dict(chat=-1), dict(chat=65), dict(ahead=0),
                                 dict(draft_length=0), dict(tokens=0), dict(context=0), dict(source=-1)])
def test_settings_refuse_an_empty_set_and_non_positive_counts(bad):
    with pytest.raises(ValueError, match="|".join(bad)):
        HeldoutSettings(**bad)


def test_source_acceptance_is_the_teacher_forced_measure_after_each_windows_context(monkeypatch):
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    other = copy.deepcopy(draft.head_module)
    with torch.no_grad():
        other.fc.weight.mul_(0.5)
    windows = [TOKENS, TOKENS[::-1]]
    monkeypatch.setattr(heldout, "SOURCE_CONTEXT", PROMPT)
    monkeypatch.setattr(heldout, "source_windows", lambda tokenizer, split, seed, size, per_file: windows)
    settings = HeldoutSettings(source=2, tokens=len(TOKENS) - PROMPT, ahead=2)
    report = source_acceptance(target, {"a": draft.head_module, "b": other}, settings)
    for name, head in (("a", draft.head_module), ("b", other)):
        expected = [torch.cat(rows) for rows in zip(*(ahead_acceptance(target, head, w[:PROMPT], w[PROMPT:], 2)
                                                     for w in windows))]
        assert [r["positions"] for r in report[name]] == [len(e) for e in expected]
        assert [r["mean"] for r in report[name]] == pytest.approx([float(e.mean()) for e in expected])
    assert report["a"] != report["b"]
    with pytest.raises(ValueError, match="source: 3 windows asked"):
        source_acceptance(target, {"a": draft.head_module}, HeldoutSettings(source=3, tokens=6))


def test_one_target_pass_serves_heads_fusing_the_same_streams():
    target, plain = tiny_feature_pair(VOCAB, SUBSET)
    _, fused = tiny_feature_pair(VOCAB, SUBSET, fusion=(1,))
    scored = heldout.target_pass(target, TOKENS[:PROMPT], TOKENS[PROMPT:], (1,))
    with torch.no_grad():  # one lean forward kept what transformers computes: final states, then the stream
        ids = torch.tensor([TOKENS])
        expected = torch.cat([target.model.model(input_ids=ids).last_hidden_state,
                              residual_streams(target.model, ids, (1,))], -1)
    torch.testing.assert_close(scored.features, expected, atol=1e-5, rtol=1e-5)
    assert heldout._fusion({"a": plain.head_module, "b": fused.head_module}) == (1,)
    for head in (plain.head_module, fused.head_module):  # the plain head reads the final states of the same pass
        alone = heldout.target_pass(target, TOKENS[:PROMPT], TOKENS[PROMPT:], head.fusion)
        for (_, got), (_, expected) in zip(heldout.ahead_rows(scored, head, 2), heldout.ahead_rows(alone, head, 2)):
            assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="head: it fuses the streams after layers \\(1,\\)"):
        heldout.ahead_rows(heldout.target_pass(target, TOKENS[:PROMPT], TOKENS[PROMPT:]), fused.head_module, 2)
    other = copy.deepcopy(fused.head_module)
    other.fusion = (2,)
    with pytest.raises(ValueError, match="heads: one target pass"):
        heldout._fusion({"a": fused.head_module, "b": other})
