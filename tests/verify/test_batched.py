"""Batched verification kernels: forced outcomes, bit-for-bit agreement with the per-row verifiers on
the same uniforms, exact enumeration through the kernels, a batch of rows with different lengths
decoded from a known-law pair (chi-square) and the broken twins that test must reject."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify import get_verifier
from draftverify.bench.verify_speed import lm_like_pair
from draftverify.rng import BranchingSource
from draftverify.testing import draw_drafts, enumerate_outcomes, exact_sequence_law, goodness_of_fit, random_pair
from draftverify.verify import batched, block
from draftverify.verify.base import VerifyResult
from draftverify.verify.batched import PAD_TOKEN_ID, draw_uniforms
from tests.factories import one_hot

STRICT = 1e-3  # as test_exactness: a correct kernel passes above this p-value (fixed seeds)
BROKEN = 1e-6  # a broken twin must fall below this one

METHODS = [("sd", {}), ("bv", {}), ("submaximal", {"fraction": 0.3}), ("greedy", {})]
SAMPLING = METHODS[:3]


def flat(rows):
    """Per-row (tokens [L], draft [L, V], target [L+1, V]) -> the flattened ragged layout."""
    tokens = torch.cat([r[0] for r in rows])
    draft = torch.cat([r[1] for r in rows])
    target = torch.cat([r[2] for r in rows])
    cu = torch.tensor([r[0].shape[0] for r in rows]).cumsum(0)
    return tokens, draft, target, cu


def verify_batch(name, *arrays, fraction=None, validate=True, **keywords):
    """The batched kernel of verifier ``name`` (``fraction`` and ``validate`` are its options)."""
    options = {} if fraction is None else {"fraction": fraction}
    return get_verifier(name, validate=validate, **options).verify_batch(*arrays, **keywords)


def per_row(name, options, rows, generator):
    verifier = get_verifier(name, **options)
    return [verifier.verify(x[None], d[None], t[None], generator=generator).tokens for x, d, t in rows]


# -- forced outcomes -------------------------------------------------------------------------


def test_all_accepted_gives_the_bonus_token_and_pads():
    probs = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]], dtype=torch.float64)
    rows = [
        (torch.tensor([2, 0]), probs, torch.cat([probs, one_hot(1)[None]])),
        (torch.tensor([1]), probs[:1], torch.cat([probs[:1], one_hot(2)[None]])),
    ]
    for name, options in SAMPLING:
        result = verify_batch(name, *flat(rows), generator=torch.Generator().manual_seed(0), **options)
        if name == "submaximal":  # withholds overlap: may reject, but the output is still padded
            assert result.output_tokens[1, 2] == PAD_TOKEN_ID
            continue
        assert result.num_accepted.tolist() == [2, 1]
        assert result.output_tokens.tolist() == [[2, 0, 1], [1, 2, PAD_TOKEN_ID]]


def test_rejection_draws_the_correction_from_the_residual():
    draft = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    target = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], dtype=torch.float64)  # T(0) = 0: always rejected
    for name in ("sd", "bv"):
        for _ in range(5):
            result = verify_batch(name, torch.tensor([0]), draft, target, torch.tensor([1]))
            assert result.token_lists() == [[2]]  # (T - D)+ is token 2


def test_rows_without_drafts_sample_the_bonus_row():
    target = torch.stack([one_hot(1), one_hot(0), one_hot(0), one_hot(0), one_hot(2)])  # rows: L = 0, 2, 0
    draft = torch.stack([one_hot(0), one_hot(0)])
    for name, options in METHODS:
        result = verify_batch(name, torch.tensor([0, 0]), draft, target, torch.tensor([0, 2, 2]), **options)
        assert result.output_tokens[0].tolist() == [1, PAD_TOKEN_ID, PAD_TOKEN_ID]
        assert result.output_tokens[2].tolist() == [2, PAD_TOKEN_ID, PAD_TOKEN_ID]
    assert verify_batch("sd", torch.tensor([], dtype=torch.int64), torch.zeros(0, 3, dtype=torch.float64),
                        target[:1], torch.tensor([0])).token_lists() == [[1]]


def test_zero_residual_mass_falls_back_to_the_target_row():
    # T < D everywhere by 1e-9 (a rounding artefact): the rejection has probability 1e-9, forced here
    draft = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    target = torch.tensor([[0.5 - 5e-10, 0.5 - 5e-10], [1.0, 0.0]], dtype=torch.float64)
    uniforms = torch.tensor([1 - 1e-10, 0.75], dtype=torch.float64)
    for name in ("sd", "bv"):
        result = verify_batch(name, torch.tensor([0]), draft, target, torch.tensor([1]), uniforms=uniforms, validate=False)
        assert result.token_lists() == [[1]]


def test_inverse_cdf_never_returns_past_the_last_positive_weight():
    # a subnormal total: u * total rounds up to total, searchsorted says V; rng.categorical's guard
    target = torch.tensor([[0.0, 1e-310, 0.0]], dtype=torch.float64)
    uniforms = torch.tensor([1 - 2.0**-53], dtype=torch.float64)
    result = verify_batch("sd", torch.tensor([], dtype=torch.int64), torch.zeros(0, 3, dtype=torch.float64),
                          target, torch.tensor([0]), uniforms=uniforms, validate=False)
    assert result.token_lists() == [[1]]


def test_greedy_ties_go_to_the_lowest_id_and_need_no_draft_probs():
    target = torch.tensor([[0.4, 0.4, 0.2], [0.1, 0.45, 0.45], [0.2, 0.2, 0.6]], dtype=torch.float64)
    result = verify_batch("greedy", torch.tensor([0, 1]), None, target, torch.tensor([2]))
    assert result.token_lists() == [[0, 1, 2]]
    per_row = get_verifier("greedy").verify(torch.tensor([[0, 1]]), torch.full((1, 2, 3), 1 / 3, dtype=torch.float64),
                                            target[None], generator=torch.Generator())
    assert per_row.tokens == [0, 1, 2] and per_row.num_accepted == 2


# -- bit for bit against the per-row verifiers ---------------------------------------------------


def random_rows(lengths, vocab, dtype, seed, zero_share=0.2):
    """Rows of (tokens, draft, target) with exact zeros in both laws (tokens drawn from the draft)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for length in lengths:
        logits = torch.randn(2 * length + 1, vocab, generator=gen, dtype=torch.float64) * 2
        logits[torch.rand(logits.shape, generator=gen) < zero_share] = -torch.inf
        logits[:, 0] = logits[:, 0].nan_to_num(neginf=0.0)  # keep every row non-empty
        probs = torch.softmax(logits, -1).to(dtype)
        draft, target = probs[:length], probs[length:]
        tokens = torch.multinomial(draft.double(), 1, generator=gen).squeeze(1)
        rows.append((tokens, draft, target))
    return rows


@pytest.mark.parametrize("name,options", METHODS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vocab", [2, 5, 300])
def test_batch_equals_per_row_verifiers_bit_for_bit(name, options, dtype, vocab):
    for seed in range(40):
        lengths = [1 + (seed + 3 * k) % 6 for k in range(1 + seed % 5)]
        rows = random_rows(lengths, vocab, dtype, seed)
        batch_gen, row_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        result = verify_batch(name, *flat(rows), generator=batch_gen, **options)
        assert result.token_lists() == per_row(name, options, rows, row_gen), (seed, lengths)
        assert result.num_accepted.tolist() == [len(t) - 1 for t in result.token_lists()]
        assert torch.equal(batch_gen.get_state(), row_gen.get_state())  # the same number of draws


@pytest.mark.parametrize("name,options", METHODS)
def test_batch_equals_per_row_verifiers_on_lm_like_rows(name, options):
    # float32 softmax rows with heavy tails (entries far below float64 resolution of the cdf)
    rows = []
    for seed, length in enumerate([4, 8, 1, 6, 8, 3]):
        tokens, draft, target = lm_like_pair(1000, length, seed=seed)
        rows.append((tokens[0], draft[0], target[0]))
    for seed in range(10):
        batch_gen, row_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        result = verify_batch(name, *flat(rows), generator=batch_gen, **options)
        assert result.token_lists() == per_row(name, options, rows, row_gen)


@pytest.mark.parametrize("name,options", SAMPLING)
def test_rows_in_blocks_equal_per_row_verifiers(monkeypatch, name, options):
    # on CPU the [rows, V] work runs in blocks of rows; one row per block here (the tests above fit
    # their whole batch in one block)
    monkeypatch.setattr(batched, "_BLOCK_BYTES", 1)
    for seed in range(10):
        rows = random_rows([1 + (seed + 2 * k) % 5 for k in range(5)], 50, torch.float32, seed)
        batch_gen, row_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        result = verify_batch(name, *flat(rows), generator=batch_gen, **options)
        assert result.token_lists() == per_row(name, options, rows, row_gen), seed


def test_seeded_calls_are_bit_identical():
    rows = random_rows([3, 1, 5], 50, torch.float32, seed=1)
    results = [verify_batch("bv", *flat(rows), generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(results[0].output_tokens, results[1].output_tokens)


# -- exact enumeration through the kernels -------------------------------------------------------


class UniformCells(BranchingSource):
    """Follows the branch choices of the enumeration's source and records, for each draw of the
    per-row verifier, a uniform inside that branch's cell, where the kernel reads it: coin i at
    slot i (``sd`` draws its L coins in one call; ``bv`` tosses from coin L - 1 down), the final
    token at slot L. A coin's success cell is [0, h), its failure cell [h, 1); token j's cell is
    [cdf_{j-1}, cdf_j) / total. Coins the verifier never tossed keep 0.5: they cannot change tau."""

    def __init__(self, inner: BranchingSource, length: int, coins_descending: bool):
        self.inner, self.length = inner, length
        self.slots = list(range(length - 1, -1, -1) if coins_descending else range(length))
        self.uniforms = [0.5] * (length + 1)

    def bernoulli(self, probs):
        hits = self.inner.bernoulli(probs)
        for prob, hit in zip(probs.to(torch.float64).flatten().tolist(), hits.flatten().tolist()):
            self.uniforms[self.slots.pop(0)] = 0.0 if hit else prob
        return hits

    def categorical(self, weights):
        index = self.inner.categorical(weights)
        cdf = torch.cumsum(weights.to(torch.float64), 0)
        low = float(cdf[index - 1]) if index else 0.0
        u = (low + float(cdf[index])) / 2 / float(cdf[-1])
        assert int(torch.searchsorted(cdf, torch.tensor(u, dtype=torch.float64) * cdf[-1], right=True)) == index
        self.uniforms[self.length] = u
        return index


class KernelAsVerifier:
    """A batched kernel on a batch of one row, behind the per-row contract's ``verify``.

    With a generator it draws its uniforms in one call. Under enumeration (a BranchingSource) the
    per-row verifier of the same name is replayed only to find the branch and a uniform in its cell;
    the committed tokens are the kernel's, so ``exact_sequence_law`` computes the kernel's law."""

    def __init__(self, name: str, **options):
        self.name, self.options = name, options

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        length = draft_tokens.shape[1]
        if isinstance(generator, BranchingSource):
            cells = UniformCells(generator, length, coins_descending=self.name == "bv")
            get_verifier(self.name, **self.options).verify(draft_tokens, draft_probs, target_probs, generator=cells)
            uniforms = torch.tensor(cells.uniforms, dtype=torch.float64)
        else:
            uniforms = draw_uniforms(length, 1, generator)
        result = verify_batch(
            self.name, draft_tokens[0], draft_probs[0], target_probs[0], torch.tensor([length]),
            uniforms=uniforms, **self.options,
        )
        tokens = result.token_lists()[0]
        return VerifyResult(tokens=tokens, num_accepted=len(tokens) - 1, draft_index=0, state=None)


PAIR = random_pair(vocab_size=3, order=2, seed=5)  # as test_exactness
TARGET_LAW = PAIR.target.law(3)


@pytest.mark.parametrize("name,options", SAMPLING)
@pytest.mark.parametrize("length", [1, 2, 3])
def test_kernel_equals_per_row_verifier_on_every_branch(name, options, length):
    verifier = get_verifier(name, **options)

    def one_call(source):
        tokens, draft, target = draw_drafts(PAIR, [1], 1, length, source)
        cells = UniformCells(source, length, coins_descending=name == "bv")
        reference = verifier.verify(tokens, draft, target, generator=cells).tokens
        uniforms = torch.tensor(cells.uniforms, dtype=torch.float64)
        kernel = verify_batch(name, tokens[0], draft[0], target[0], torch.tensor([length]), uniforms=uniforms, **options)
        assert kernel.token_lists() == [reference]
        return tuple(reference)

    assert sum(enumerate_outcomes(one_call).values()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name,options", SAMPLING)
@pytest.mark.parametrize("length", [1, 2])
def test_enumerated_law_of_the_kernel_equals_target(name, options, length):
    law = exact_sequence_law(KernelAsVerifier(name, **options), PAIR, draft_length=length, num_tokens=3)
    np.testing.assert_allclose(law, TARGET_LAW, atol=1e-9, rtol=0)


# -- a batch of rows with different lengths from a known-law pair --------------------------------


def decode_batch(name, pair, lengths, num_tokens, seed, device="cpu", **options) -> np.ndarray:
    """Decode one sequence per entry of ``lengths`` (its draft length L_b, 0 allowed) together: each
    step drafts L_b tokens for every unfinished row and verifies all rows in ONE batched call, its
    arrays and uniforms (a generator of ``device``) on ``device``.
    Returns the first ``num_tokens`` tokens of every row [R, num_tokens]."""
    vocab, order = pair.vocab_size, pair.target.order
    modulus = vocab**order
    draft_rng, generator = np.random.default_rng(seed), torch.Generator(device).manual_seed(seed)
    lengths = np.asarray(lengths)
    context = np.full(len(lengths), int(pair.target.context_index(np.asarray(pair.target.start))))
    out = np.full((len(lengths), num_tokens), -1)
    filled = np.zeros(len(lengths), dtype=np.int64)
    while (filled < num_tokens).any():
        active = np.flatnonzero(filled < num_tokens)
        length = lengths[active]  # [A]
        max_len = int(length.max())
        contexts = np.empty((len(active), max_len + 1), dtype=np.int64)  # contexts of x^0..x^L
        contexts[:, 0] = context[active]
        drafted = np.zeros((len(active), max_len), dtype=np.int64)
        for i in range(max_len):  # the draft chain, one position at a time for every row (inverse CDF)
            cdf = np.cumsum(pair.draft.table[contexts[:, i]], axis=1)
            scaled = draft_rng.random(len(active))[:, None] * cdf[:, -1:]
            drafted[:, i] = np.minimum((cdf <= scaled).sum(1), vocab - 1)
            contexts[:, i + 1] = (contexts[:, i] * vocab + drafted[:, i]) % modulus
        positions = np.arange(max_len + 1)
        in_draft, in_target = positions[:max_len] < length[:, None], positions <= length[:, None]
        arrays = (drafted[in_draft], pair.draft.table[contexts[:, :max_len][in_draft]],
                  pair.target.table[contexts[in_target]], np.cumsum(length))
        result = verify_batch(name, *(torch.from_numpy(a).to(device) for a in arrays), generator=generator, **options)
        tokens, accepted = result.output_tokens.cpu().numpy(), result.num_accepted.cpu().numpy()
        for j in range(max_len + 1):  # commit position j of every row that reached it
            committed = j <= accepted
            keep = committed & (filled[active] < num_tokens)
            out[active[keep], filled[active[keep]]] = tokens[keep, j]
            filled[active[keep]] += 1
            rows = active[committed]
            context[rows] = (context[rows] * vocab + tokens[committed, j]) % modulus
    return out


def batch_p_value(name, options, rows=24000, num_tokens=4, seed=11, device="cpu") -> float:
    pair = random_pair(vocab_size=4, order=2, seed=seed)
    lengths = np.arange(rows) % 5  # L_b = 0, 1, 2, 3, 4 side by side in every call
    sequences = decode_batch(name, pair, lengths, num_tokens, seed, device, **options)
    cells = sequences @ (pair.vocab_size ** np.arange(num_tokens - 1, -1, -1))
    counts = np.bincount(cells, minlength=pair.vocab_size**num_tokens).astype(float)
    return goodness_of_fit(counts, pair.target.law(num_tokens).ravel())[0]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]  # on CUDA the uniforms come from CUDA's generator:
# the one part of a CUDA decoding that the bit-for-bit comparisons with the CPU below do not see


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,options", SAMPLING)
def test_batch_of_ragged_rows_decodes_the_target_law(name, options, device):
    p_value = batch_p_value(name, options, device=device)
    assert p_value > STRICT, p_value


def first_failure(success: torch.Tensor) -> torch.Tensor:
    """tau = successes before the first failure (the known BV bug)."""
    return success.to(torch.int64).cumprod(dim=1).sum(dim=1)


def residual_is_target(target_rows, draft_rows, withheld):
    """The correction drawn from the target instead of the residual."""
    return target_rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "name,module,attribute,twin",
    [("bv", block, "last_true", first_failure), ("sd", batched, "correction_weights", residual_is_target)],
)
def test_batch_test_rejects_broken_twin_kernels(monkeypatch, name, module, attribute, twin, device):
    monkeypatch.setattr(module, attribute, twin)
    p_value = batch_p_value(name, {}, device=device)
    assert p_value < BROKEN, p_value
    law = exact_sequence_law(KernelAsVerifier(name), PAIR, draft_length=2, num_tokens=3)
    assert np.abs(law - TARGET_LAW).sum() > 1e-3  # the enumeration exposes the twin too


# -- validation at the public boundary ------------------------------------------------------------


def valid_inputs():
    rows = random_rows([2, 3], 4, torch.float64, seed=0, zero_share=0.0)
    return list(flat(rows))


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a, k: a.__setitem__(3, torch.tensor([2, 4])), "end at num_tokens"),
        (lambda a, k: a.__setitem__(3, torch.tensor([3, 2])), "non-decreasing"),
        (lambda a, k: a.__setitem__(2, a[2][:-1]), "target_probs: expected shape"),
        (lambda a, k: a.__setitem__(1, a[1].float()), "dtype mismatch"),
        (lambda a, k: a.__setitem__(1, None), "draft_probs is required"),
        (lambda a, k: a.__setitem__(0, a[0] + 10), "token ids must lie"),
        (lambda a, k: a.__setitem__(2, a[2] * 1.1), "rows must sum to 1"),
        (lambda a, k: k.update(uniforms=torch.zeros(7)), "uniforms: expected float64"),
        (lambda a, k: k.update(uniforms=torch.ones(7, dtype=torch.float64)), r"must lie in \[0, 1\)"),
        (lambda a, k: k.update(max_draft_len=2), "below the longest draft"),
        (lambda a, k: k.update(fraction=0.5), r"does not take option\(s\) fraction"),
        (lambda a, k: k.update(generator=7), "generator: expected a torch.Generator .* or None, got int"),
        (lambda a, k: k.update(generator=np.random.default_rng(0)), "got numpy.random._generator.Generator"),
    ],
)
def test_public_boundary_rejects_bad_inputs(change, message):
    arrays, keywords = valid_inputs(), {}
    change(arrays, keywords)
    with pytest.raises(ValueError, match=message):
        verify_batch("sd", *arrays, **keywords)


def test_drafted_token_of_zero_draft_probability_is_rejected():
    tokens, draft, target, cu = valid_inputs()
    draft[1] = one_hot((int(tokens[1]) + 1) % 4, 4)
    with pytest.raises(ValueError, match="zero draft probability"):
        verify_batch("bv", tokens, draft, target, cu)
    with pytest.raises(ValueError, match="fraction must lie"):
        verify_batch("submaximal", tokens, draft, target, cu, fraction=1.5)
    with pytest.raises(ValueError, match="'gbv' has no batched kernel"):
        verify_batch("gbv", tokens, draft, target, cu)
    with pytest.raises(ValueError, match="generator: expected a torch.Generator"):
        draw_uniforms(3, 2, generator=BranchingSource())  # a batch draws its uniforms; it cannot branch


def test_generator_on_another_device_than_the_probabilities_is_an_error():
    with pytest.raises(ValueError, match="generator: on cpu, the probabilities on meta"):
        draw_uniforms(3, 2, torch.Generator().manual_seed(0), device="meta")  # what verify_batch calls


# -- CUDA: the kernels where the tensors live ----------------------------------------------------


@CUDA
@pytest.mark.parametrize("name,options", METHODS)
def test_cuda_kernels_match_cpu_without_host_sync(name, options):
    tokens, draft, target, cu = flat(random_rows([1, 4, 2, 8, 3] * 8, 300, torch.float32, seed=2))
    uniforms = draw_uniforms(tokens.shape[0], cu.shape[0], torch.Generator().manual_seed(0))
    cpu = verify_batch(name, tokens, draft, target, cu, uniforms=uniforms, **options)
    kernel = get_verifier(name, **options).kernel  # no checks: the public boundary reads the offsets
    args = [a.cuda() for a in (tokens, draft, target, cu, uniforms)]
    torch.cuda.set_sync_debug_mode("error")
    try:
        gpu = kernel(*args, 8)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(gpu.output_tokens.cpu(), cpu.output_tokens)


@CUDA
@pytest.mark.parametrize("name,options", METHODS)
def test_cuda_public_boundary_matches_cpu(name, options):
    """The validated entry point on CUDA tensors: outputs on the device, equal to the CPU's for the
    same uniforms; the ragged batch mixes L_b = 0 (bonus only) with longer drafts."""
    arrays = flat(random_rows([0, 4, 1, 8, 3, 0, 2] * 4, 5, torch.float64, seed=3))
    uniforms = draw_uniforms(arrays[0].shape[0], arrays[3].shape[0], torch.Generator().manual_seed(1))
    cpu = verify_batch(name, *arrays, uniforms=uniforms, **options)
    gpu = verify_batch(name, *(a.cuda() for a in arrays), uniforms=uniforms.cuda(), **options)
    assert gpu.output_tokens.is_cuda
    assert torch.equal(gpu.output_tokens.cpu(), cpu.output_tokens)
    assert torch.equal(gpu.num_accepted.cpu(), cpu.num_accepted)


@CUDA
def test_cuda_generator_for_cpu_probabilities_is_an_error():
    arrays = valid_inputs()
    with pytest.raises(ValueError, match="generator: on cuda.*the probabilities on cpu"):
        verify_batch("sd", *arrays, generator=torch.Generator("cuda").manual_seed(0))
