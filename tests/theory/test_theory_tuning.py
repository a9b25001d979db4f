"""theory.tuning: the block law along a path against enumeration of the verifiers, the call count
against simulation of the boundary chain and, for a draft whose law depends on the depth within a
block, against the exact expectation of the decoding; and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from draftverify.testing import enumerate_outcomes
from draftverify.theory import kseq_acceptance, kseq_position_law, longest_prefix_claim, selection_position_law
from draftverify.theory.tuning import (
    StepCosts,
    expected_calls,
    fit_overhead,
    gbv_expected_accepted,
    kseq_path_survival,
    multidraft_bv_path_survival,
    least_squares_line,
    path_survival,
    plug_in_survival,
    predicted_tokens_per_second,
    tokens_per_call,
)
from draftverify.verify.multidraft_bv import sequential_selection
from tests.factories import random_tables, registered_verifier

VOCAB, LENGTH = 3, 2


def _block_law(method: str, target: list[np.ndarray], draft: list[np.ndarray], **options) -> dict[tuple[int, ...], float]:
    """Exact law of the block one call commits: drafts drawn from the tables, then the verifier."""
    verifier = registered_verifier(method, **options)

    def call(source):
        tokens = []
        for i in range(LENGTH):
            tokens.append(source.categorical(torch.from_numpy(draft[i][tuple(tokens)])))
        draft_rows = np.stack([draft[i][tuple(tokens[:i])] for i in range(LENGTH)])
        target_rows = np.stack([target[i][tuple(tokens[:i])] for i in range(LENGTH + 1)])
        result = verifier.verify(torch.tensor([tokens]), torch.from_numpy(draft_rows)[None],
                                 torch.from_numpy(target_rows)[None], generator=source)
        return tuple(result.tokens)

    return enumerate_outcomes(call)


def _block_share(survival: np.ndarray, m: int) -> float:
    """pi(m) = S(m - 1) - S(m) for m <= L, S(L) for the block of L + 1 (the bonus)."""
    return survival[m - 1] - survival[m] if m <= LENGTH else survival[LENGTH]


@pytest.mark.parametrize("method,options", [("sd", {}), ("bv", {}), ("submaximal", {"fraction": 0.3}),
                                            ("submaximal", {"fraction": 1.0})])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_law_along_a_path_matches_enumeration(method, options, seed):
    """P_block(w) = T(w) pi(|w|), pi(m) = S(m - 1) - S(m) (m <= L), S(L) for m = L + 1: the
    identity the estimator rests on, for every block the verifier can commit."""
    rng = np.random.default_rng(seed)
    target, draft = random_tables(rng, VOCAB, LENGTH + 1, 0.7), random_tables(rng, VOCAB, LENGTH, 0.7)
    law = _block_law(method, target, draft, **options)
    assert sum(law.values()) == pytest.approx(1.0)
    for block, prob in law.items():
        m = len(block)
        t = [target[i][block[:i]][block[i]] for i in range(m)]
        d = [draft[i][block[:i]][block[i]] for i in range(min(m, LENGTH))]
        ratios = np.ones(LENGTH)
        ratios[: len(d)] = np.array(d) / np.array(t[: len(d)])
        survival = path_survival(ratios, LENGTH, method, **options)[0]
        assert prob == pytest.approx(np.prod(t) * _block_share(survival, m), abs=1e-12), block


def _multidraft_block_law(method: str, num_drafts: int, target: list[np.ndarray],
                          draft: list[np.ndarray]) -> dict[tuple[int, ...], float]:
    """Exact law of the block one ``method`` call commits over K drafts drawn i.i.d. from the tables."""
    verifier = registered_verifier(method)

    def call(source):
        drafts = []
        for _ in range(num_drafts):
            tokens = []
            for i in range(LENGTH):
                tokens.append(source.categorical(torch.from_numpy(draft[i][tuple(tokens)])))
            drafts.append(tokens)
        draft_rows = np.stack([[draft[i][tuple(d[:i])] for i in range(LENGTH)] for d in drafts])  # [K, L, V]
        target_rows = np.stack([[target[i][tuple(d[:i])] for i in range(LENGTH + 1)] for d in drafts])  # [K, L + 1, V]
        result = verifier.verify(torch.tensor(drafts), torch.from_numpy(draft_rows), torch.from_numpy(target_rows),
                                 generator=source)
        return tuple(result.tokens)

    return enumerate_outcomes(call)


def _enumerated(method: str, num_drafts: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """Random target and draft tables and the exact law of the block one ``method`` call commits."""
    rng = np.random.default_rng(seed)
    target, draft = random_tables(rng, VOCAB, LENGTH + 1, 0.7), random_tables(rng, VOCAB, LENGTH, 0.7)
    law = _multidraft_block_law(method, num_drafts, target, draft)
    assert sum(law.values()) == pytest.approx(1.0)
    return target, draft, law


def _path_probability(target: list[np.ndarray], block: tuple[int, ...]) -> float:
    """T(w) of a block w under the target tables."""
    return float(np.prod([target[i][block[:i]][block[i]] for i in range(len(block))]))


@pytest.mark.parametrize("num_drafts, seed", [(2, 0), (2, 1), (2, 2), (3, 3)])
def test_kseq_block_law_along_a_path_matches_enumeration(num_drafts, seed):
    """The same identity for K-SEQ over K drafts: P_block(w) = T(w) pi(|w|) with the survival of
    the live-draft chain (kseq_path_survival), for every block the verifier can commit; the
    plug-in's mean-field count of live drafts misses it."""
    target, draft, law = _enumerated("kseq", num_drafts, seed)
    worst_plug_in = 0.0
    for block, prob in law.items():
        m = len(block)
        laws = np.zeros((m, LENGTH, num_drafts, num_drafts))  # position j read at depth j + 1
        acceptance, path_draft = np.ones((m, LENGTH, num_drafts)), np.ones((m, LENGTH))
        for j in range(min(m, LENGTH)):
            t_row, d_row = target[j][block[:j]][None], draft[j][block[:j]][None]
            laws[j, j] = kseq_position_law(t_row, d_row, np.array([block[j]]), num_drafts)[0]
            acceptance[j, j] = [kseq_acceptance(t_row, d_row, k)[0] for k in range(1, num_drafts + 1)]
            path_draft[j, j] = d_row[0, block[j]]
        t = _path_probability(target, block)
        for survival, exact in ((kseq_path_survival(laws, LENGTH)[0], True),
                                (plug_in_survival(acceptance, LENGTH, path_draft)[0], False)):
            if exact:
                assert prob == pytest.approx(t * _block_share(survival, m), abs=1e-12), block
            else:
                worst_plug_in = max(worst_plug_in, abs(prob - t * _block_share(survival, m)))
    assert worst_plug_in > 1e-4


@pytest.mark.parametrize("num_drafts, seed", [(2, 0), (2, 1), (3, 2)])
def test_multidraft_bv_block_law_along_a_path_matches_enumeration(num_drafts, seed):
    """The identity for multidraft-bv: bv's survival with the selection's law as draft rows, averaged
    over the chain of live-draft counts (multidraft_bv_path_survival), for every block it commits;
    taking the count as K at every level misses it."""
    target, draft, law = _enumerated("multidraft-bv", num_drafts, seed)
    worst_fixed_count = 0.0
    for block, prob in law.items():
        m = len(block)
        laws = np.zeros((m, LENGTH, num_drafts, num_drafts))  # position j read at depth j + 1
        for j in range(min(m, LENGTH)):
            t_row, d_row = torch.from_numpy(target[j][block[:j]]), torch.from_numpy(draft[j][block[:j]])
            for count in range(1, num_drafts + 1):
                accept = sequential_selection(t_row, d_row, count)[0].numpy()
                laws[j, j, count - 1, :count] = selection_position_law(
                    t_row[block[j]].numpy()[None], d_row[block[j]].numpy()[None], accept[block[j]][None],
                    (d_row.numpy() @ accept)[None], count, first_if_none=True)[0]
        t = _path_probability(target, block)
        share = _block_share(multidraft_bv_path_survival(laws, LENGTH)[0], m)
        assert prob == pytest.approx(t * share, abs=1e-12), block
        fixed = laws.copy()  # every level read with K candidates
        fixed[:, :, :] = laws[:, :, -1:].sum(-1, keepdims=True) * np.eye(num_drafts)[-1]
        fixed_share = _block_share(multidraft_bv_path_survival(fixed, LENGTH)[0], m)
        worst_fixed_count = max(worst_fixed_count, abs(prob - t * fixed_share))
    assert worst_fixed_count > 1e-4


def test_selection_position_law_sums_to_the_selection_law():
    """Summed over s, T(y) times multidraft-bv's position law is the selected token's law
    (sequential_selection's), and with one candidate it is D."""
    rng = np.random.default_rng(6)
    target, draft = (torch.from_numpy(random_tables(rng, 6, 1)[0]) for _ in range(2))
    for count in (1, 2, 4):
        accept, selected = sequential_selection(target, draft, count)
        law = selection_position_law(target.numpy(), draft.numpy(), accept.numpy(),
                                     np.full(6, float(draft @ accept)), count, first_if_none=True)
        assert law.sum(1) * target.numpy() == pytest.approx(selected.numpy(), abs=1e-12)
    assert law.shape == (6, 4)


def test_kseq_position_law_sums_to_its_acceptance():
    """Summed over y ~ D and s, T(y) times the law is K-SEQ's one-position acceptance with m drafts;
    with one draft it is sd's min(1, D / T)."""
    rng = np.random.default_rng(5)
    target, draft = random_tables(rng, 6, 1)[0], random_tables(rng, 6, 1)[0]
    rows = np.repeat(target[None], 6, 0), np.repeat(draft[None], 6, 0)
    law = kseq_position_law(*rows, np.arange(6), 4)  # [V, K, K]
    accepted = (law.sum(-1) * target[:, None]).sum(0)  # [K]
    assert accepted == pytest.approx([kseq_acceptance(target[None], draft[None], m)[0] for m in range(1, 5)])
    assert law[:, 0, 0] == pytest.approx(np.minimum(1, draft / target))
    assert np.all(np.triu(law, 1) == 0)  # s <= m: only drafts alive can be kept


def test_expected_calls_matches_a_simulated_chain():
    rng = np.random.default_rng(3)
    n, length = 40, 3
    survival = path_survival(rng.uniform(0.2, 1.6, n), length, "bv")
    blocks = np.concatenate([survival[:, :-1] - survival[:, 1:], survival[:, -1:]], axis=1)
    t, runs = np.zeros(20000, dtype=np.int64), np.zeros(20000)
    while np.any(t < n):  # all runs at once: each unfinished one takes a block of law pi_t
        going = t < n
        cdf = np.cumsum(blocks[t[going]], axis=1)
        t[going] += 1 + (rng.random((going.sum(), 1)) * cdf[:, -1:] >= cdf).sum(axis=1)
        runs[going] += 1
    assert expected_calls(survival) == pytest.approx(np.mean(runs), abs=4 * np.std(runs) / np.sqrt(len(runs)))


def _markov_tables(first: np.ndarray, transitions: list[np.ndarray], length: int) -> list[np.ndarray]:
    """Conditional tables [V] * (i + 1), i = 0..length-1, of a block whose i-th token follows
    ``first`` [V] (i = 0) or ``transitions[i]`` [V, V] from the token before it."""
    vocab = len(first)
    return [first] + [np.broadcast_to(transitions[i], (vocab,) * (i - 1) + (vocab, vocab)).copy()
                      for i in range(1, length)]


@pytest.mark.parametrize("method", ["sd", "bv"])
def test_per_depth_ratios_give_the_exact_expected_calls_of_a_depth_dependent_draft(method):
    """A known-law decoding: an order-1 Markov target and a draft whose law at the d-th drafted
    position of a step is its own order-1 table D_d (a feature draft's depth dependence in
    miniature). The exact expected number of calls to commit N tokens, by dynamic programming over
    (tokens committed, last token) with each call's block law enumerated through the verifier,
    equals the estimator's expectation over target paths with ratios [N, L] per depth; with the
    first depth's ratios alone ([N], "the same at every depth") it is off."""
    rng = np.random.default_rng(7)
    tokens, start = 5, 0
    target = rng.dirichlet(np.ones(VOCAB), VOCAB)  # T(. | last token) [V, V]
    draft = [rng.dirichlet(np.full(VOCAB, 0.7), VOCAB) for _ in range(LENGTH)]  # D_d [V, V], d = 1..L
    blocks = {last: _block_law(method, _markov_tables(target[last], [target] * (LENGTH + 1), LENGTH + 1),
                               _markov_tables(draft[0][last], draft, LENGTH))
              for last in range(VOCAB)}  # the law of one call's block after a last token
    calls = np.zeros((tokens + LENGTH + 2, VOCAB))  # calls[t, last]: expected calls for tokens t..N-1
    for t in range(tokens - 1, -1, -1):
        for last in range(VOCAB):
            calls[t, last] = 1 + sum(prob * (calls[t + len(w), w[-1]] if t + len(w) < tokens else 0.0)
                                     for w, prob in blocks[last].items())
    per_depth = first_depth = 0.0
    for path in itertools.product(range(VOCAB), repeat=tokens):
        previous = (start,) + path[:-1]
        probability = np.prod(target[previous, path])
        ratios = np.stack([d[previous, path] for d in draft], 1) / target[previous, path][:, None]  # [N, L]
        per_depth += probability * expected_calls(path_survival(ratios, LENGTH, method))
        first_depth += probability * expected_calls(path_survival(ratios[:, 0], LENGTH, method))
    assert per_depth == pytest.approx(calls[0, start], abs=1e-12)
    assert abs(first_depth - calls[0, start]) > 1e-3


def test_per_depth_gbv_acceptance_is_the_joint_overlap():
    """gbv's per-call E[tau] with ratios per depth, averaged over target blocks, is
    sum_k sum_x min(T(x^k), D(x^k)) for a draft whose table differs by depth."""
    rng = np.random.default_rng(5)
    target = rng.dirichlet(np.ones(VOCAB), VOCAB)
    draft = [rng.dirichlet(np.full(VOCAB, 0.7), VOCAB) for _ in range(LENGTH)]
    target_tables = _markov_tables(target[0], [target] * LENGTH, LENGTH)
    draft_tables = _markov_tables(draft[0][0], draft, LENGTH)
    expected = 0.0
    for block in itertools.product(range(VOCAB), repeat=LENGTH):
        previous = (0,) + block[:-1]
        ratios = np.stack([d[previous, block] for d in draft], 1) / target[previous, block][:, None]  # [L, L]
        expected += np.prod(target[previous, block]) * gbv_expected_accepted(ratios, LENGTH)[0]
    assert expected == pytest.approx(longest_prefix_claim(target_tables, draft_tables).claimed.sum())


def test_the_same_values_at_every_depth_reproduce_the_one_dimensional_estimates():
    rng = np.random.default_rng(6)
    n, length = 9, 3
    ratios, draft_probs = rng.uniform(0.1, 1.8, n), rng.uniform(0.05, 0.9, n)
    acceptance = np.sort(rng.uniform(0.2, 0.9, (n, 2)), axis=1)  # K' = 1, 2
    wide = length + 2  # L' > L: the extra depths are not read

    def deep(values):
        return np.repeat(values[:, None], wide, axis=1)

    for method in ("sd", "bv"):
        assert np.array_equal(path_survival(deep(ratios), length, method), path_survival(ratios, length, method))
    assert np.array_equal(gbv_expected_accepted(deep(ratios), length), gbv_expected_accepted(ratios, length))
    assert np.array_equal(plug_in_survival(np.repeat(acceptance[:, None], wide, 1), length, deep(draft_probs)),
                          plug_in_survival(acceptance, length, draft_probs))
    assert np.array_equal(plug_in_survival(deep(acceptance[:, 0])[..., None], length),
                          plug_in_survival(acceptance[:, 0], length))


def test_a_block_reads_the_diagonal_of_per_depth_values():
    ratios = np.array([[0.5, 0.1, 0.2], [2.0, 0.9, 0.3], [0.7, 0.8, 0.6], [1.0, 1.0, 0.4]])  # [N = 4, L' = 3]
    # the block from t = 0 reads depth 1 at t = 0, depth 2 at t = 1, depth 3 at t = 2
    assert path_survival(ratios, 3, "sd")[0].tolist() == pytest.approx([1, 0.5, 0.45, 0.27])
    assert path_survival(ratios, 3, "bv")[1].tolist() == pytest.approx([1, 1, 1, 0.64])  # 2, 2 * 0.8, 2 * 0.8 * 0.4
    acceptance = np.array([[[0.5], [0.4]], [[0.9], [0.6]], [[0.7], [0.3]]])  # [N = 3, L' = 2, K = 1]
    assert plug_in_survival(acceptance, 2)[0].tolist() == pytest.approx([1, 0.5, 0.3])
    two = np.concatenate([acceptance, acceptance + 0.1], axis=2)  # K' = 1, 2
    draft_probs = np.array([[0.5, 0.2], [0.4, 0.5], [0.3, 0.9]])
    # depth 2 at t = 1 with 1 + D_1(y_0) = 1.5 drafts: (0.6 + 0.7) / 2
    assert plug_in_survival(two, 2, draft_probs)[0].tolist() == pytest.approx([1, 0.6, 0.6 * 0.65])


def test_survival_orders_and_edge_cases():
    ratios = np.array([0.5, 2.0, 0.9, 1.0])
    sd, bv = path_survival(ratios, 3, "sd"), path_survival(ratios, 3, "bv")
    assert np.all(bv >= sd - 1e-15)  # bv's min of products >= sd's product of mins
    assert sd[0].tolist() == pytest.approx([1, 0.5, 0.5, 0.45])
    assert bv[0].tolist() == pytest.approx([1, 0.5, 0.5, 0.5])
    assert expected_calls(path_survival(np.ones(10), 4, "sd")) == 2.0  # blocks of 5: two calls
    assert expected_calls(path_survival(np.zeros(10), 4, "sd")) == 10.0
    assert plug_in_survival(np.full(5, 0.5), 2)[0].tolist() == [1, 0.5, 0.25]
    assert np.array_equal(path_survival(ratios, 3, "submaximal", fraction=0.0), sd)
    assert path_survival(ratios, 3, "submaximal", fraction=0.5)[0].tolist() == pytest.approx([1, 0.25, 0.125, 0.05625])


def test_multidraft_plug_in_counts_the_drafts_left():
    acceptance = np.array([[0.5, 0.8]] * 3)  # K' = 1, 2
    survival = plug_in_survival(acceptance, 2, path_draft_probs=np.array([0.5, 0.5, 0.5]))
    # position 1 with K = 2 drafts (0.8); position 2 with 1 + 0.5 drafts expected (0.65)
    assert survival[0].tolist() == pytest.approx([1, 0.8, 0.8 * 0.65])
    assert plug_in_survival(acceptance[:, :1], 2)[0].tolist() == pytest.approx([1, 0.5, 0.25])


def test_gbv_per_call_acceptance_is_the_joint_overlap():
    """Averaged over target paths, sum_k E_T[min(1, prod rho)] = sum_k sum_x min(T(x^k), D(x^k))."""
    rng = np.random.default_rng(4)
    target, draft = random_tables(rng, VOCAB, LENGTH, 0.7), random_tables(rng, VOCAB, LENGTH, 0.7)
    expected = 0.0
    for x1 in range(VOCAB):
        for x2 in range(VOCAB):
            t = target[0][x1] * target[1][x1, x2]
            ratios = [draft[0][x1] / target[0][x1], draft[1][x1, x2] / target[1][x1, x2]]
            expected += t * gbv_expected_accepted(ratios, LENGTH)[0]
    assert expected == pytest.approx(longest_prefix_claim(target, draft).claimed.sum())


def test_tokens_per_call_ratio_and_error():
    one = tokens_per_call([100], [40])
    assert (one.mean, one.standard_error, one.paths) == (2.5, 0.0, 1)
    several = tokens_per_call([100, 100, 100], [40, 50, 45])
    assert several.mean == pytest.approx(300 / 135) and several.standard_error > 0


def test_tokens_per_call_error_is_the_spread_of_the_ratio():
    """The delta-method standard error of sum N / sum calls against the spread of the estimate
    itself over 2,000 sets of 50 paths (60-200 tokens, 2-4 tokens a call): within 10%."""
    rng = np.random.default_rng(0)
    estimates = []
    for _ in range(2000):
        tokens = rng.integers(60, 200, size=50).astype(float)
        estimates.append(tokens_per_call(tokens, tokens / rng.uniform(2, 4, size=50)))
    spread = np.std([e.mean for e in estimates])
    assert np.mean([e.standard_error for e in estimates]) == pytest.approx(spread, rel=0.1)


def _synthetic_costs(max_length: int = 8) -> StepCosts:
    """Model calls c = 0.1, r(L + 1) = 1 + 0.05 L (t_T = 1), a verifier growing with L, no overhead."""
    lengths = np.arange(max_length + 1)
    return StepCosts(tuple(0.1 * lengths), tuple(1 + 0.05 * lengths), tuple(0.02 + 0.01 * lengths),
                     (0.0,) * (max_length + 1), prefill=0.0)


def test_overhead_fit_recovers_what_the_model_calls_leave_out():
    """A synthetic engine: each step costs the modelled calls plus a fixed 0.3 (first call, commit)
    and 0.04 per drafted token (sampling), the decoding a prefill of 5; the fitted line gives the
    overhead back, and tokens/s of a decoding with k tokens per step is predicted exactly."""
    model = _synthetic_costs()
    lengths = np.array([1, 2, 3, 4, 5, 6, 7, 8, 3, 5])
    model_seconds = np.array([model.step(length) for length in lengths])
    engine_seconds = model_seconds + 0.3 + 0.04 * lengths
    overhead = fit_overhead(lengths, engine_seconds, model_seconds, 8)
    assert overhead == pytest.approx(tuple(0.3 + 0.04 * np.arange(9)))
    costs = StepCosts(model.draft, model.target, model.verify, overhead, prefill=5.0)
    steps, k = 40, 3.0  # a decoding of 40 steps of 3 tokens with L = 4
    seconds = 5.0 + steps * (model.step(4) + 0.3 + 0.04 * 4)
    assert predicted_tokens_per_second(k, costs, 4, int(steps * k)) == pytest.approx(steps * k / seconds)
    # without the overhead, the prediction is too high, more so at long L where sampling adds up
    assert predicted_tokens_per_second(k, model, 4, 120) > steps * k / (seconds - 5.0)
    assert least_squares_line([2, 2, 2], [1.0, 2.0, 3.0]) == (2.0, 0.0)  # one length: flat
    assert least_squares_line([1, 3], [1.0, 5.0], [1.0, 3.0]) == pytest.approx((-1.0, 2.0))


@pytest.mark.parametrize("make", [
    lambda: StepCosts((0.0, 0.1), (1.0, 1.0), (0.0,), (0.0, 0.0)),
    lambda: StepCosts((0.0,), (1.0,), (0.0,), (0.0,)),
    lambda: StepCosts((0.0, 0.1), (1.0, 1.0), (0.0, 0.0), (0.0, 0.0), prefill=-1.0),
    lambda: _synthetic_costs(2).step(3),
    lambda: fit_overhead([1, 2], [1.0, 2.0], [1.0], 4),
    lambda: least_squares_line([1, 2], [1.0, 2.0], [0.0, 0.0]),
    lambda: least_squares_line([1, 2], [1.0, float("nan")]), lambda: least_squares_line([[1, 2]], [1.0]),
    lambda: least_squares_line([1, 2], [1.0]), lambda: least_squares_line([1, 2], [1.0, 2.0], [1.0, -1.0]),
])
def test_bad_costs(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("call", [
    lambda: path_survival([0.5, -1.0], 2, "sd"),
    lambda: path_survival([0.5], 0, "sd"),
    lambda: path_survival([0.5], 2, "kseq"),
    lambda: path_survival([0.5], 2, "submaximal"),  # no fraction
    lambda: path_survival([0.5], 2, "sd", fraction=0.5),  # a fraction for sd
    lambda: path_survival([0.5], 2, "submaximal", fraction=1.5),
    lambda: plug_in_survival([1.5], 2),
    lambda: plug_in_survival([[0.5, 0.6]], 2),
    lambda: path_survival([[0.5], [0.7]], 2, "sd"),  # one depth given, L = 2
    lambda: path_survival(np.ones((2, 2, 2)), 2, "sd"),
    lambda: plug_in_survival(np.full((3, 1, 1), 0.5), 2),
    lambda: plug_in_survival(np.full((3, 2), 0.5), 2, np.full((3, 1), 0.5)),
    lambda: gbv_expected_accepted([0.5], 2),
    lambda: expected_calls([[1.0, 0.5, 0.7]]),
    lambda: tokens_per_call([1, 2], [1]),
    lambda: predicted_tokens_per_second(2.0, StepCosts((0.0, 0.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)), 1, 10),
    lambda: predicted_tokens_per_second(0.5, _synthetic_costs(), 1, 10),
    lambda: kseq_path_survival(np.full((3, 2, 2), 0.6), 2),  # a row sums above 1
    lambda: kseq_path_survival(np.zeros((3, 2, 3)), 2),  # not square
    lambda: multidraft_bv_path_survival(np.full((3, 1, 2, 2), 0.2), 2),  # one depth, L = 2
    lambda: multidraft_bv_path_survival(-np.ones((3, 2, 2)), 2),
    lambda: kseq_position_law(np.full((2, 2), 0.5), np.full((2, 2), 0.5), np.array([0, 2]), 2),  # token 2 of 2
    lambda: kseq_position_law(np.array([[1.0, 0.0]]), np.full((1, 2), 0.5), np.array([1]), 2),  # T(y) = 0
    lambda: selection_position_law([0.5], [0.5], [1.5], [0.5], 2, first_if_none=True),  # taken_at > 1
    lambda: selection_position_law([0.0], [0.5], [0.5], [0.5], 2, first_if_none=True),  # T(y) = 0
    lambda: selection_position_law([0.5, 0.5], [0.5], [0.5], [0.5], 2, first_if_none=True),
    lambda: selection_position_law([0.5], [0.5], [0.5], [0.5], 0, first_if_none=True),
])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()
