"""Would a draft-confidence stopping rule, or a longer L, pay on the default pair? (speed_smollm2.md)

Decodes HumanEval chat prompts with ``sd`` at L = 8 (temperature 1, float32 target, the shipped
draft, one thread) and records per step the draft's probability of each drafted token, the draft's
largest probability at each position and how many drafted tokens the target accepted. A rule that
stops drafting after position l commits min(accepted, l) + 1 tokens from the same draws (token-level
sd tests position i with the same draw whatever comes after it), so every rule is scored on the same
steps: fixed L = 1..8, and "stop after the first drafted token whose draft probability (or whose
position's largest draft probability) is below a threshold, at most L_max". A step's cost in
one-token calls of ``ar`` is r(l + 1) + l c + v: r from ``bench model-cost`` (docs/results/
model_cost_smollm2.json, linear between its 1, 2, 5, 9 and 17 tokens), c and v (the verification
and commit beside the calls) from ``bench speed``'s sd row (speed_smollm2_float32_L3_stage15_seed1.json).
Also the acceptance, the same at every position, that 2.0x ``ar`` would need at each L with those costs.

    PYTHONPATH=src python docs/results/stopping_rules_smollm2.py --prompts 64 --json docs/results/stopping_rules_smollm2.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from draftverify.bench.models import ModelSettings, load_models
from draftverify.engine import decoder
from draftverify.engine.generate import generate_batch
from draftverify.models.chat import encode_prompt
from draftverify.theory import tokens_per_step
from draftverify.train.measure import humaneval_prompts

RESULTS = Path(__file__).parent


def record(prompts: int, max_length: int) -> list[dict]:
    """One record per sd step: drafted tokens' draft probabilities, largest draft probabilities, accepted."""
    torch.set_num_threads(1)
    target, drafts, tokenizer = load_models(ModelSettings(quantize="float32"))
    steps, init = [], decoder.Decoder.__init__

    def watched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        verify = self.verifier.verify_rows

        def verify_rows(draft_tokens, draft_probs, target_probs, generator, states, lengths):
            results = verify(draft_tokens, draft_probs, target_probs, generator, states, lengths)
            drawn = draft_probs.gather(2, draft_tokens[..., None])[..., 0]  # [R, L]
            for r, result in enumerate(results):
                steps.append(dict(drawn=drawn[r].tolist(), largest=draft_probs[r].amax(1).tolist(),
                                  accepted=result.num_accepted))
            return results

        object.__setattr__(self.verifier, "verify_rows", verify_rows)

    decoder.Decoder.__init__ = watched
    for i, text in enumerate(humaneval_prompts(prompts)):
        generate_batch(target, drafts["draft"], [encode_prompt(tokenizer, text)], "sd", draft_length=max_length,
                       temperature=1.0, max_new_tokens=128, seed=100 + i, ignore_eos=True)
    decoder.Decoder.__init__ = init
    return steps


def costs() -> tuple[np.ndarray, float, float]:
    """r(n) for n = 1..17 target tokens, c, and v (one-token ar calls)."""
    cost = json.loads((RESULTS / "model_cost_smollm2.json").read_text())
    (variant,) = [v for v in cost["variants"] if v["variant"] == cost["kernel"]["name"].replace("-", "_")]
    sizes = [1, 2, 5, 9, 17]
    r = np.interp(np.arange(18), sizes, [1.0] + [variant[f"r_{n}"] for n in sizes[1:]])
    speed = json.loads((RESULTS / "speed_smollm2_float32_L3_stage15_seed1.json").read_text())
    ar, sd = ({m["method"]: m for m in speed["methods"]}[name] for name in ("ar", "sd"))
    v = (sd["step_ms"]["verify"] + sd["step_ms"]["other"]) / ar["step_ms"]["total"]
    return r, sd["cost_ratio"], v


def score(steps: list[dict], lengths: np.ndarray, r: np.ndarray, c: float, v: float) -> dict:
    """Tokens a call and speed against ar when step s drafts lengths[s] tokens."""
    accepted = np.array([s["accepted"] for s in steps])
    tokens = np.minimum(accepted, lengths) + 1
    seconds = r[lengths + 1] + lengths * c + v
    return dict(tokens_per_call=round(float(tokens.mean()), 4), vs_ar=round(float(tokens.sum() / seconds.sum()), 4))


def stop_lengths(steps: list[dict], key: str, threshold: float, max_length: int) -> np.ndarray:
    """Each step's l: the first position whose ``key`` probability is below ``threshold`` (its token
    still verified), else ``max_length``."""
    values = np.array([s[key][:max_length] for s in steps])  # [S, L_max]
    low = values < threshold
    return np.where(low.any(1), low.argmax(1) + 1, max_length)


def acceptance_for(speedup: float, length: int, r: np.ndarray, c: float, v: float) -> float | None:
    """The acceptance a, the same at every position (seed 002's i.i.d. model), at which L = ``length``
    gives ``speedup``: tokens_per_step(a, L) = speedup (r(L + 1) + L c + v), by bisection (None: not below 1)."""
    needed = speedup * (r[length + 1] + length * c + v)
    if needed >= length + 1:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):
        a = (low + high) / 2
        low, high = (a, high) if tokens_per_step(a, length) < needed else (low, a)
    return round(low, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    steps = record(args.prompts, 8)
    r, c, v = costs()
    accepted = np.array([s["accepted"] for s in steps])
    fixed = {length: score(steps, np.full(len(steps), length), r, c, v) for length in range(1, 9)}
    rules = [dict(rule=key, threshold=threshold, max_length=max_length,
                  **score(steps, stop_lengths(steps, key, threshold, max_length), r, c, v))
             for key in ("drawn", "largest") for threshold in (0.05, 0.1, 0.2, 0.3, 0.5) for max_length in (4, 6, 8)]
    best = max(rules, key=lambda rule: rule["vs_ar"])
    report = dict(command=f"python docs/results/stopping_rules_smollm2.py --prompts {args.prompts} --json {args.json}",
                  steps=len(steps), r=[round(float(x), 4) for x in r[1:18]], c=round(c, 4), v=round(v, 4),
                  reached=[round(float((accepted >= i).mean()), 4) for i in range(1, 9)],
                  fixed=fixed, rules=rules, best_rule=best,
                  acceptance_for_2x={length: acceptance_for(2.0, length, r, c, v) for length in range(1, 9)})
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(steps)} steps; P(accepted >= i) {report['reached']}")
    print("fixed L:", {length: f"{s['tokens_per_call']:.3f} tokens, {s['vs_ar']:.3f}x" for length, s in fixed.items()})
    print("best stopping rule:", best)
    print("acceptance at every position for 2.0x:", report["acceptance_for_2x"])


if __name__ == "__main__":
    main()
