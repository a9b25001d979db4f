"""The factories of the tests, in one place: seeded Dirichlet rows and the verifier inputs built
from them (draft tokens sampled from their draft rows), one-hot rows, conditional tables for the
theory (random, order-1, or a known-law Markov model's) and a hypothesis strategy of distribution
pairs; the engine's models of a known-law pair; the tiny random transformer pair (as models, or
written to folders for the command line); a tiny feature-draft pair; weights made of GGML blocks
and a tiny Llama of them; any registered verifier; the synthetic SPRINTER classifier of given rates
and a linear one that reads the draft's law alone. The broken twins are in
``tests/verify/broken_twins.py`` and ``tests/testing/conform_twins.py``."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

import draftverify
from draftverify import get_verifier, verifiers
from draftverify.approx import FeatureSpec, LinearClassifier
from draftverify.models.feature_draft import FeatureDraft, FeatureHead
from draftverify.models.ggml_blocks import BLOCK, dequantize, random_q4_1
from draftverify.models.hf import TransformersModel
from draftverify.models.toy import ToyModel, tiny_causal_lm
from draftverify.testing import KnownLawPair, MarkovModel


def random_distributions(rng: np.random.Generator | int, *shape: int, concentration: float = 1.0) -> np.ndarray:
    """Probability vectors of shape ``[*shape]`` (the last axis is V), Dirichlet(``concentration``)
    rows drawn from ``rng`` (a numpy Generator, or a seed): small concentrations give peaked rows
    with near-zero entries, large ones rows close to uniform."""
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    *rows, vocab = shape
    return rng.dirichlet(np.full(vocab, concentration), size=tuple(rows) or None)


def random_verify_inputs(
    seed: int, num_drafts: int = 1, length: int = 3, vocab: int = 5, dtype: torch.dtype = torch.float64,
    concentration: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Arrays of the verifier contract: draft tokens ``[K, L]`` sampled from draft rows
    ``[K, L, V]``, and target rows ``[K, L + 1, V]``, all from one seed."""
    rng = np.random.default_rng(seed)
    draft = random_distributions(rng, num_drafts, length, vocab, concentration=concentration)
    target = random_distributions(rng, num_drafts, length + 1, vocab, concentration=concentration)
    tokens = np.array([[rng.choice(vocab, p=draft[k, i]) for i in range(length)] for k in range(num_drafts)])
    return torch.from_numpy(tokens), torch.from_numpy(draft).to(dtype), torch.from_numpy(target).to(dtype)


def one_hot(index: int, vocab: int = 3, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The row ``[V]`` with all its mass on ``index``."""
    return torch.nn.functional.one_hot(torch.tensor(index), vocab).to(dtype)


def random_tables(rng: np.random.Generator, vocab: int, length: int, concentration: float = 1.0) -> list[np.ndarray]:
    """Conditional tables of a random autoregressive model: ``tables[i]`` of shape [V] * (i + 1)."""
    return [random_distributions(rng, *(vocab,) * (i + 1), concentration=concentration) for i in range(length)]


def markov_tables(model: MarkovModel, length: int) -> list[np.ndarray]:
    """The conditional tables of a :class:`MarkovModel` over its first ``length`` tokens."""
    vocab = model.vocab_size
    tables = []
    for i in range(length):
        prefixes = np.array(list(itertools.product(range(vocab), repeat=i)), dtype=np.int64).reshape(vocab**i, i)
        start = np.broadcast_to(np.asarray(model.start, dtype=np.int64), (len(prefixes), model.order))
        rows = model.table[model.context_index(np.concatenate([start, prefixes], axis=1))]  # [V^i, V]
        tables.append(rows.reshape((vocab,) * (i + 1)))
    return tables


def order_one_tables(rng: np.random.Generator, vocab: int, length: int, concentration: float = 1.0) -> list[np.ndarray]:
    """Tables of an order-1 Markov chain (next token depends on the last token only)."""
    first = random_distributions(rng, vocab, concentration=concentration)
    transition = random_distributions(rng, vocab, vocab, concentration=concentration)  # [V, V]
    return [first] + [np.broadcast_to(transition, (vocab,) * (i - 1) + (vocab, vocab)).copy() for i in range(1, length)]


@st.composite
def distribution_pairs(draw, min_vocab: int = 2, max_vocab: int = 6):
    """(target, draft) over V tokens, from seeded Dirichlet draws with varied concentration."""
    vocab = draw(st.integers(min_vocab, max_vocab))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    concentration = draw(st.sampled_from([0.2, 1.0, 5.0]))
    return random_distributions(rng, vocab, concentration=concentration), random_distributions(rng, vocab, concentration=concentration)


def toy_models(pair: KnownLawPair) -> tuple[ToyModel, ToyModel]:
    """The target and draft of a known-law pair as the engine's language models."""
    return ToyModel(pair.target), ToyModel(pair.draft)


def tiny_lms(vocab: int, *, seeds: tuple[int, int] = (0, 1), target_width: int = 32, target_layers: int = 2,
             **options: Any) -> tuple[Any, Any]:
    """The tiny random ``transformers`` pair of the tests (raw models): a target ``target_width``
    wide with ``target_layers`` layers and a draft 16 wide with one layer, each seeded by
    ``seeds``; ``options`` (``arch``, ``dtype``, ``max_positions``) go to both
    (:func:`draftverify.models.toy.tiny_causal_lm`)."""
    target = tiny_causal_lm(vocab, width=target_width, layers=target_layers, seed=seeds[0], **options)
    return target, tiny_causal_lm(vocab, width=16, layers=1, seed=seeds[1], **options)


def tiny_pair(vocab: int, *, tokenizer: Any = None, **options: Any) -> tuple[TransformersModel, TransformersModel]:
    """:func:`tiny_lms` as the engine's models; the target carries ``tokenizer``."""
    target, draft = tiny_lms(vocab, **options)
    return TransformersModel(target, tokenizer), TransformersModel(draft)


# the environment of a fresh interpreter (subprocess) that imports the draftverify this process imported: a
# worktree's, not the one installed beside it
FRESH_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(Path(draftverify.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))}


def tiny_feature_pair(vocab: int, subset: torch.Tensor, *, seed: int = 0, quantize: str | None = None,
                      layers: int = 1, fusion: tuple[int, ...] = ()) -> tuple[TransformersModel, FeatureDraft]:
    """A tiny Llama target (two decoder layers) and a random feature draft of ``layers`` decoder
    layers for it over the tokens ``subset``, fusing the target's streams after the layers of
    ``fusion`` (float32 by default: compared with the head's own forward; the shipped default is
    int8)."""
    target = TransformersModel(tiny_causal_lm(vocab, arch="llama", dtype=torch.float32, seed=seed))
    torch.manual_seed(seed + 1)
    head = FeatureHead(target.model.config, subset, layers, fusion)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(torch.randn_like(parameter))  # far from the default init: every term matters
    return target, FeatureDraft(head, target, quantize=quantize)


def save_pair(root: Path, target: Any, draft: Any, tokenizer: Any) -> Path:
    """Write raw models as the folders the command line loads: ``root/target`` (with the tokenizer)
    and ``root/draft``; returns ``root``."""
    target.save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    draft.save_pretrained(root / "draft")
    return root


def registered_verifier(name: str, **options):
    """Any registered verifier with ``options`` (one that disappeared from the registry fails here,
    it is not skipped); ``sprinter`` gets the rate classifier it requires (a test device that says
    "yes" by given rates)."""
    assert name in {info.name for info in verifiers()}, f"verifier {name!r} is not registered"
    if name == "sprinter":
        options = {"classifier": RateClassifier(), **options}
    return get_verifier(name, **options)


@dataclass(frozen=True, eq=False)
class RateClassifier:
    """A synthetic classifier with given rates, for testing the theory: it looks at the truth and
    says "yes" with probability ``false_positive_rate`` when D(x) > T(x), ``true_positive_rate``
    otherwise. Each rate is a number or an array ``[V]`` indexed by the drafted token."""

    false_positive_rate: Any = 0.0
    true_positive_rate: Any = 1.0

    scored = False  # no score: the threshold does not apply

    def __post_init__(self) -> None:
        for name in ("false_positive_rate", "true_positive_rate"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.ndim > 1 or not np.all((value >= 0) & (value <= 1)):
                raise ValueError(f"{name}: expected a number or a [V] array in [0, 1], got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)

    def yes_probability(self, tokens, draft_probs, *, hidden=None, target_probs=None, threshold=0.5) -> torch.Tensor:
        if target_probs is None:
            raise ValueError("RateClassifier looks at the target's probabilities: it is a test device, not for the engine")
        at = tokens.long().unsqueeze(-1)  # [N, 1]
        unacceptable = (draft_probs.gather(-1, at) > target_probs.gather(-1, at))[:, 0]  # [N]
        rates = [torch.from_numpy(np.broadcast_to(r, (draft_probs.shape[-1],)).copy())[tokens.long()]
                 for r in (self.false_positive_rate, self.true_positive_rate)]
        return torch.where(unacceptable, rates[0], rates[1])  # [N] float64


def probability_classifier(weights: tuple[float, float] = (1.0, 0.3), bias: float = 0.6) -> LinearClassifier:
    """A SPRINTER classifier that decides from log D(x) and the entropy of D only (no hidden
    state), so on a Markov pair its decision is a function of the context and the drafted token and
    the predicted law is again a Markov chain; with the defaults it says both yes and no."""
    return LinearClassifier(np.array(weights), bias, np.zeros(2), np.ones(2), FeatureSpec(hidden=False), 1.0)


def q4_1_weight(shape: tuple[int, int], seed: int) -> torch.Tensor:
    """A [K, N] float32 weight dequantized from random Q4_1 blocks (:func:`~draftverify.models.ggml_blocks.random_q4_1`)."""
    return random_q4_1(shape, torch.Generator().manual_seed(seed))


def q8_0_weight(shape: tuple[int, int], seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    k, n = shape
    q = torch.randint(-127, 128, (k, n), generator=gen, dtype=torch.int8)
    q[::BLOCK] = 127  # ggml's scale gives every block a weight of |q| = 127
    d = (torch.rand(k // BLOCK, n, generator=gen) * 0.001 + 1e-5).half()
    return dequantize(q, d), q, d


def block_llama(vocab: int = 50, width: int = 64) -> torch.nn.Module:
    """A tiny Llama (two heads of width / 2) whose linear layers hold Q4_1 blocks and whose (tied)
    embedding Q8_0 blocks, as a model converted from SmolLM2's GGUF file does."""
    model = tiny_causal_lm(vocab, arch="llama", width=width, dtype=torch.float32, seed=5)
    with torch.no_grad():
        for index, module in enumerate(m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not model.lm_head):
            module.weight.copy_(q4_1_weight(tuple(module.weight.t().shape), 10 + index).t())
        model.lm_head.weight.copy_(q8_0_weight((width, vocab), 99)[0].t())
        if model.lm_head.weight is not model.model.embed_tokens.weight:
            model.model.embed_tokens.weight.copy_(model.lm_head.weight)
    return model
