"""The engine's ``sprinter`` method: its output law on known-law models is the one the theory
predicts from the classifier's decisions, it is the target's when the classifier never says yes,
and its caches, statistics and decision log stay consistent on a transformers pair."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify import theory
from draftverify.approx import FeatureSpec, LinearClassifier, Sprinter, load_classifier
from draftverify.models.hidden import draft_fingerprint
from draftverify.engine import DecodeConfig, Decoder, generate_batch
from draftverify.testing import MarkovModel, goodness_of_fit, random_pair
from tests.factories import probability_classifier, random_distributions, tiny_pair, toy_models

VOCAB, NUM_TOKENS, SAMPLES = 3, 4, 2500
STRICT, BROKEN = 1e-3, 1e-6


def predicted_chain(pair, classifier, threshold) -> MarkovModel:
    yes = classifier.yes_all_tokens(torch.from_numpy(pair.draft.table), threshold=threshold).double().numpy()  # [C, V]
    table = theory.sprinter_output_law(pair.target.table, pair.draft.table, yes)
    return MarkovModel(table, pair.target.order, pair.target.start)


def law_after(markov, prompt, num_tokens) -> np.ndarray:
    law, contexts = np.ones(1), [list(prompt)]
    for _ in range(num_tokens):
        law = (law[:, None] * np.stack([markov.conditional(c) for c in contexts])).ravel()
        contexts = [c + [t] for c in contexts for t in range(markov.vocab_size)]
    return law


def engine_counts(pair, verifier, prompt=(1,), draft_length=NUM_TOKENS, seed=0) -> np.ndarray:
    results = generate_batch(*toy_models(pair), [list(prompt)] * SAMPLES, verifier,
                             draft_length=draft_length, max_new_tokens=NUM_TOKENS, seed=seed)
    counts = np.zeros(VOCAB**NUM_TOKENS)
    for result in results:
        counts[int(np.dot(result.tokens, VOCAB ** np.arange(NUM_TOKENS - 1, -1, -1)))] += 1
    return counts


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=VOCAB, order=2, seed=3)


def test_engine_law_is_the_predicted_one_not_the_targets(pair):
    classifier = probability_classifier()
    yes = classifier.yes_all_tokens(torch.from_numpy(pair.draft.table))
    assert 0.2 < float(yes.double().mean()) < 0.9  # the classifier says both yes and no
    counts = engine_counts(pair, Sprinter(classifier=classifier))
    assert goodness_of_fit(counts, law_after(predicted_chain(pair, classifier, 0.5), [1], NUM_TOKENS))[0] > STRICT
    assert goodness_of_fit(counts, law_after(pair.target, [1], NUM_TOKENS))[0] < BROKEN


def test_engine_is_exact_when_the_classifier_never_says_yes(pair):
    never = Sprinter(threshold=1.0, classifier=probability_classifier())  # sigmoid < 1: always "no"
    counts = engine_counts(pair, never, draft_length=2)
    assert goodness_of_fit(counts, law_after(pair.target, [1], NUM_TOKENS))[0] > STRICT


def test_yes_all_tokens_agrees_with_the_decisions_on_drawn_tokens():
    torch.manual_seed(0)
    probs = torch.from_numpy(random_distributions(0, 6, 5))
    hidden = torch.randn(6, 4, dtype=torch.float64)
    spec = FeatureSpec()
    classifier = LinearClassifier(np.array([0.3, -1.0, 0.5, 0.2, 1.2, -0.7]), 0.1, np.full(6, 0.1), np.full(6, 2.0), spec, 1.2, 4)
    table = classifier.yes_all_tokens(probs, hidden)
    for token in range(5):
        tokens = torch.full((6,), token)
        np.testing.assert_array_equal(classifier.yes_probability(tokens, probs, hidden=hidden).numpy(), table[:, token].double().numpy())


def test_transformers_pair_caches_stats_and_log(tmp_path):
    target, draft = tiny_pair(40, seeds=(1, 2), dtype=torch.float32)
    hidden_size = 16
    classifier = LinearClassifier(np.r_[np.zeros(hidden_size), 1.0, 0.0], 3.7, np.zeros(hidden_size + 2),
                                  np.ones(hidden_size + 2), FeatureSpec(), 1.2, hidden_size)
    path = classifier.save(tmp_path / "classifier.json")
    config = DecodeConfig("sprinter", draft_length=5, max_new_tokens=20, options={"classifier": load_classifier(path)})
    prompts = [[3, 4, 5], [7, 8], [9, 10, 11, 12]]
    decoder = Decoder(target, draft, prompts, config)
    steps = []
    while not decoder.done:
        steps.extend(decoder.step())
        decoder.check_caches()
    for index in range(len(prompts)):
        log, generated = decoder.states[index], decoder.generated(index)
        assert len(generated) == 20
        row_steps = [s.stats for s in steps if s.index == index]
        assert sum(s.target_calls for s in row_steps) == len(row_steps)
        assert sum(s.committed for s in row_steps) == 20
        assert all(s.drafted <= 5 and s.accepted <= s.drafted for s in row_steps)
        # a "yes" token is committed as drafted, at its logged position
        for position, token, yes in zip(log.positions, log.tokens, log.yes):
            if yes and position < len(generated):
                assert generated[position] == token
        assert any(log.yes) and not all(log.yes)
    # the same seed gives the same tokens
    again = Decoder(target, draft, prompts, config)
    while not again.done:
        again.step()
    assert [again.generated(i) for i in range(3)] == [decoder.generated(i) for i in range(3)]
    # a classifier marked with another draft's fingerprint is refused; with this draft's, it runs
    classifier.info["draft_fingerprint"] = "0" * 16
    other = Decoder(target, draft, prompts, DecodeConfig(Sprinter(classifier=classifier), max_new_tokens=2))
    with pytest.raises(ValueError, match="another draft"):
        other.step()
    classifier.info["draft_fingerprint"] = draft_fingerprint(draft)
    Decoder(target, draft, prompts, DecodeConfig(Sprinter(classifier=classifier), max_new_tokens=2)).step()


def test_hidden_state_classifier_needs_a_transformers_draft(pair):
    classifier = LinearClassifier(np.zeros(4), 0.0, np.zeros(4), np.ones(4), FeatureSpec(log_draft_prob=False), 1.0, 3)
    with pytest.raises(ValueError, match="output layer"):
        generate_batch(*toy_models(pair), [[1]], Sprinter(classifier=classifier), max_new_tokens=2)


def test_a_feature_draft_runs_sprinter_and_gives_training_data(tmp_path):
    from draftverify.approx.data import collect
    from draftverify.models.hidden import HiddenStateTap
    from tests.factories import tiny_feature_pair

    target, draft = tiny_feature_pair(60, torch.arange(0, 60, 2))
    hidden_size = HiddenStateTap(draft).hidden_size
    assert hidden_size == target.config.hidden_size  # the tap reads the draft's last hidden state
    documents = [list(range(i, i + 30)) for i in range(0, 30, 3)]
    data = collect(target, draft, documents, sequences_per_kind=2, prefix_length=6, positions=4, batch_size=2, seed=1)
    assert len(data) == 4 * 2 * 4 and data.hidden.shape == (32, hidden_size)
    assert np.isfinite(data.log_draft_prob).all() and (data.ratio > 0).all()  # drawn from the draft: D(x) > 0
    classifier = LinearClassifier(np.r_[np.zeros(hidden_size), 1.0, 0.0], 2.0, np.zeros(hidden_size + 2),
                                  np.ones(hidden_size + 2), FeatureSpec(), 1.2, hidden_size,
                                  info={"draft_fingerprint": draft_fingerprint(draft)})
    from draftverify.approx.audit import audit_positions

    prompts = [[3, 4, 5], [7]]
    decoder = Decoder(target, draft, prompts, DecodeConfig(Sprinter(classifier=classifier), max_new_tokens=12,
                                                          draft_length=4, seed=3))
    while not decoder.done:
        decoder.step()
    for index, prompt in enumerate(prompts):
        log, generated = decoder.states[index], decoder.generated(index)
        assert len(generated) == 12 and len(log.depths) == len(log.positions) and max(log.depths) > 1
        audit = audit_positions(target, draft, decoder.verifier, prompt, generated, log)
        first = [p for p, d in zip(log.positions, log.depths) if d == 1 and p < 12]
        assert len(audit.yes) == len(first) > 0  # a feature draft is audited where one pass gives its law


def test_the_shipped_classifiers_answer_for_the_draft_that_decodes(tmp_path):
    from draftverify.approx.load import DEFAULT_CLASSIFIER, ShippedClassifiers

    target, draft = tiny_pair(40, seeds=(1, 2), dtype=torch.float32)
    tiny = LinearClassifier.load(DEFAULT_CLASSIFIER)
    size = 16  # tiny_pair's hidden size
    mine = LinearClassifier(np.zeros(size + 2), 0.0, np.zeros(size + 2), np.ones(size + 2), FeatureSpec(), 1.2, size,
                            info={"draft_fingerprint": draft_fingerprint(draft)})
    shipped = ShippedClassifiers((DEFAULT_CLASSIFIER, mine.save(tmp_path / "classifier.json"), tmp_path / "missing.json"))
    assert shipped.path_for(draft) == tmp_path / "classifier.json" and shipped.for_draft(draft).info == mine.info
    assert shipped.path_for(target) == DEFAULT_CLASSIFIER  # no classifier for it: the tiny pair's, refused below
    assert shipped.spec == tiny.spec and callable(shipped.yes_probability)  # the tiny pair's answers otherwise
    prompts = [[3, 4, 5]]
    Decoder(target, draft, prompts, DecodeConfig(Sprinter(classifier=shipped), max_new_tokens=2)).step()
    with pytest.raises(ValueError, match="another draft"):
        Decoder(target, target, prompts, DecodeConfig(Sprinter(classifier=shipped), max_new_tokens=2)).step()


@pytest.mark.slow
def test_the_default_pair_runs_sprinter_with_its_own_classifier():
    import draftverify
    from draftverify.approx.load import SMOLLM2_CLASSIFIER
    from draftverify.models.chat import encode_prompt

    pair = draftverify.load_pair()
    assert load_classifier().path_for(pair.draft) == SMOLLM2_CLASSIFIER  # not the tiny pair's, which it would refuse
    prompt = encode_prompt(pair.tokenizer, "Say hello.")
    run = draftverify.generate(pair.target, pair.draft, prompt, "sprinter(threshold=0.45)", max_new_tokens=8, seed=3)
    assert len(run.tokens) == 8
