"""`draftverify bench spectr-gbv`: SpecTr-GBV (seed 004) as published against exact multi-draft
verifiers, by exact enumeration on toy Markov pairs (the numbers of docs/spectr-gbv.md).

Sections: (1) the regression of docs/corrections.md (V = 2, K = 2, L = 1); (2) exactness: total
variation between the exact law of the first tokens decoded through a verifier (every draft and
every draw enumerated, state passed across calls) and the target's; (3) seed 004's claimed optimum
(Lemma 5.1) against alpha* (Hu et al. 2025) and K-SEQ's acceptance at L = 1; (4) block efficiency:
exact expected accepted tokens of the first call on toy pairs for bv, gbv, kseq, ot (lp),
spectr-gbv and multidraft-bv, and tokens per target call over long seeded runs (which includes the
later calls of the stateful gbv and spectr-gbv). Baselines are measured in the same run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import get_verifier
from ..testing import (
    KnownLawPair, MarkovModel, decode_known_law, draw_drafts, enumerate_outcomes, exact_sequence_law, random_pair,
)
from ..theory import multidraft_acceptance, spectr_gbv_claimed_bound
from .output import emit_json
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

# (label, verifier name, options, uses K drafts)
METHODS = (
    ("bv", "bv", {}, False),
    ("gbv", "gbv", {}, False),
    ("kseq", "kseq", {}, True),
    ("ot-lp", "ot", {"solver": "lp"}, True),
    ("spectr-gbv", "spectr-gbv", {}, True),
    ("multidraft-bv", "multidraft-bv", {}, True),
    ("multidraft-bv-ot", "multidraft-bv", {"selection": "ot"}, True),
)

# toy instances of section 4: (vocabulary, pair seed, K, L)
INSTANCES = ((2, 1, 2, 2), (2, 1, 3, 2), (2, 2, 2, 3), (3, 2, 2, 2), (3, 3, 2, 2))
QUICK_INSTANCES = INSTANCES[:1] + INSTANCES[3:4]


@dataclass(frozen=True)
class SpectrGbvSettings:
    """What ``draftverify bench spectr-gbv`` computes, as its flags of the same names give it (the
    defaults are the command's): ``quick`` fewer instances; ``runs`` long-run decodings of
    ``num_tokens`` tokens per verifier and instance (0: none)."""

    quick: bool = False
    runs: int = 0
    num_tokens: int = 60
    seed: int = 0
    json: str | None = None


def context_free_pair(target, draft) -> KnownLawPair:
    """Order-1 chains whose every conditional is ``target`` / ``draft``."""
    target, draft = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    vocab = target.size
    return KnownLawPair(MarkovModel(np.tile(target, (vocab, 1)), 1), MarkovModel(np.tile(draft, (vocab, 1)), 1))


def first_call_law(verifier, pair: KnownLawPair, num_drafts: int, draft_length: int) -> dict:
    """Exact law of (committed tokens, accepted count) of one call from the pair's start: the K
    drafts and the verifier's draws enumerated together (no state)."""

    def one_call(source):
        tokens, draft_probs, target_probs = draw_drafts(pair, [], num_drafts, draft_length, source)
        result = verifier.verify(tokens, draft_probs, target_probs, generator=source)
        return tuple(result.tokens), result.num_accepted

    return enumerate_outcomes(one_call)


def first_call_expected_accepted(verifier, pair: KnownLawPair, num_drafts: int, draft_length: int) -> float:
    """E[accepted tokens] of one call from the pair's start, exactly."""
    return sum(prob * accepted for (_, accepted), prob in first_call_law(verifier, pair, num_drafts, draft_length).items())


def first_token_law(verifier, pair: KnownLawPair, num_drafts: int, draft_length: int) -> np.ndarray:
    """Exact law [V] of the first committed token (an exact verifier gives the target's)."""
    law = np.zeros(pair.vocab_size)
    for (tokens, _), prob in first_call_law(verifier, pair, num_drafts, draft_length).items():
        law[tokens[0]] += prob
    return law


def regression() -> dict:
    """docs/corrections.md: V = 2, K = 2, L = 1, D = (1/2, 1/2), T = (0.9, 0.1)."""
    pair = context_free_pair([0.9, 0.1], [0.5, 0.5])
    verifier = get_verifier("spectr-gbv")
    law = first_token_law(verifier, pair, 2, 1)
    return {
        "first_token_a": float(law[0]),
        "first_token_a_fraction": "151/162",
        "target_a": 0.9,
        "expected_accepted": first_call_expected_accepted(verifier, pair, 2, 1),
        "expected_accepted_fraction": "307/405",
        "claimed": float(spectr_gbv_claimed_bound([np.array([0.9, 0.1])], [np.array([0.5, 0.5])], 2).sum()),
    }


def exactness(quick: bool, progress: Progress | None = None) -> list[dict]:
    """TV between the exact law of the first 3 tokens (through the whole decoding loop) and the target."""
    pair = random_pair(vocab_size=2, order=2, seed=3)
    target = pair.target.law(3)
    cases = [("spectr-gbv", {}, k, length) for k in (1, 2, 3) for length in (1, 2)]
    cases += [("multidraft-bv", {}, k, length) for k in (2, 3) for length in (1, 2)]
    if quick:
        cases = [case for case in cases if case[2] < 3]
    rows = []
    for name, options, k, length in track(progress, cases, "exactness by enumeration"):
        law = exact_sequence_law(get_verifier(name, **options), pair, num_drafts=k, draft_length=length, num_tokens=3)
        rows.append({"verifier": name, "K": k, "L": length, "tv": float(0.5 * np.abs(law - target).sum())})
    return rows


def claim_against_optimum(count: int, seed: int) -> dict:
    """Random (T, D) over V in 2..5 and K in 2..4 at L = 1: how often seed 004's "optimal" value lies
    below K-SEQ and below alpha*, and the first ``count`` instances where it is below both."""
    rng = np.random.default_rng(seed)
    below_kseq = below_optimum = trials = 0
    examples = []
    while trials < 2000:
        trials += 1
        vocab, k = int(rng.integers(2, 6)), int(rng.integers(2, 5))
        target, draft = rng.dirichlet(np.full(vocab, 0.7)), rng.dirichlet(np.full(vocab, 0.7))
        values = multidraft_acceptance(target, draft, k)
        below_kseq += values.spectr_gbv_claim < values.kseq - 1e-12
        below_optimum += values.spectr_gbv_claim < values.optimal - 1e-12
        if values.spectr_gbv_claim < values.kseq - 1e-3 and len(examples) < count:
            examples.append(
                {"target": target.round(4).tolist(), "draft": draft.round(4).tolist(), "K": k,
                 "claim": values.spectr_gbv_claim, "kseq": values.kseq, "alpha_star": values.optimal}
            )
    return {"trials": trials, "claim_below_kseq": below_kseq / trials, "claim_below_alpha_star": below_optimum / trials, "examples": examples}


def long_run(verifier, pair, num_drafts, draft_length, runs: int, num_tokens: int, seed: int) -> tuple[float, float]:
    """Tokens per target call over ``runs`` seeded decodings of ``num_tokens`` tokens: (mean, stderr)."""
    generator, draft_rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    per_run = []
    for _ in range(runs):
        trace = decode_known_law(verifier, pair, num_drafts, draft_length, num_tokens, generator, draft_rng)
        per_run.append((trace.accepted + trace.calls) / trace.calls)
    return float(np.mean(per_run)), float(np.std(per_run) / np.sqrt(runs))


def efficiency(instances, runs: int, num_tokens: int, seed: int, progress: Progress | None = None) -> list[dict]:
    rows = []
    for vocab, pair_seed, k, length in track(progress, instances, "block efficiency on toy pairs"):
        pair = random_pair(vocab_size=vocab, order=2, seed=pair_seed)
        row = {"V": vocab, "pair_seed": pair_seed, "K": k, "L": length, "claimed": float(
            spectr_gbv_claimed_bound(_tables(pair.target, length), _tables(pair.draft, length), k).sum())}
        for label, name, options, multi in METHODS:
            verifier = get_verifier(name, **options)
            drafts = k if multi else 1
            row[label] = first_call_expected_accepted(verifier, pair, drafts, length)
            if runs:
                row[label + " tokens/call"] = long_run(verifier, pair, drafts, length, runs, num_tokens, seed)
        rows.append(row)
    return rows


def _tables(model: MarkovModel, length: int) -> list[np.ndarray]:
    """Conditional tables [V]*(i+1) of the first ``length`` tokens from the model's start."""
    vocab = model.vocab_size
    tables = []
    for i in range(length):
        table = np.zeros((vocab,) * (i + 1))
        for path in np.ndindex(*(vocab,) * i):
            table[path] = model.conditional(list(path))
        tables.append(table)
    return tables


def run(args: SpectrGbvSettings, progress: Progress | None = None) -> int:
    report = {
        "regression": regression(),
        "exactness": exactness(args.quick, progress),
        "claim_vs_optimum": claim_against_optimum(3, args.seed),
        "efficiency": efficiency(QUICK_INSTANCES if args.quick else INSTANCES, args.runs, args.num_tokens, args.seed,
                                 progress),
    }
    emit_json(report, args.json)
    print(format_tables(report))
    return 0


def format_tables(report: dict) -> str:
    reg = report["regression"]
    lines = [
        "", "regression (V=2, K=2, L=1, D=(1/2,1/2), T=(0.9,0.1)):",
        f"  P(first token = a) = {reg['first_token_a']:.6f} ({reg['first_token_a_fraction']}; target 0.9)",
        f"  E[tau] = {reg['expected_accepted']:.6f} ({reg['expected_accepted_fraction']}; claimed {reg['claimed']:.6f})",
        "", "exactness: TV(first 3 tokens, target), exact enumeration across calls (V=2 order-2 pair, seed 3):",
    ]
    lines += [f"  {row['verifier']:<14} K={row['K']} L={row['L']}  TV = {row['tv']:.3e}" for row in report["exactness"]]
    claim = report["claim_vs_optimum"]
    lines += ["", f"claimed optimum at L=1 over {claim['trials']} random instances: below K-SEQ in "
              f"{claim['claim_below_kseq']:.1%}, below alpha* in {claim['claim_below_alpha_star']:.1%}"]
    lines += [f"  K={e['K']} T={e['target']} D={e['draft']}: claim {e['claim']:.4f} < kseq {e['kseq']:.4f} <= alpha* {e['alpha_star']:.4f}" for e in claim["examples"]]
    labels = [m[0] for m in METHODS]
    lines += ["", "expected accepted tokens, first call, exact:", "  V seed K L | claimed | " + " | ".join(labels)]
    for row in report["efficiency"]:
        lines.append(f"  {row['V']} {row['pair_seed']:>4} {row['K']} {row['L']} | {row['claimed']:.4f} | " + " | ".join(f"{row[label]:.4f}" for label in labels))
        if labels[0] + " tokens/call" in row:
            lines.append("    tokens/call (long runs): " + " | ".join(f"{row[label + ' tokens/call'][0]:.3f}" for label in labels))
    return "\n".join(lines)
