"""Predicted (tune's unbiased path estimate) against decoded tokens per target call, sd and bv at
L = 1, 2, 4, 8, on the embedded pair: the check behind docs/results/tune.md."""
import json

import numpy as np
import torch

torch.set_num_threads(1)
from draftverify.bench.prompts import load_prompts
from draftverify.bench.tune import TuneSettings, record_paths, measure
from draftverify.models.pair import load_pair
from draftverify.theory.tuning import expected_calls, path_survival, tokens_per_call

pair = load_pair()
prompts = [pair.tokenizer.encode(t) for t in load_prompts("humaneval", limit=4)]
s = TuneSettings(methods=("sd", "bv"), max_new_tokens=48)
paths = record_paths(pair.target, pair.draft, prompts, s)
tokens = np.array([len(p.ratios) for p in paths], float)
specs = [(m, L) for m in ("sd", "bv") for L in (1, 2, 4, 8)]
measured = measure(pair.target, pair.draft, prompts, specs, s)
rows = []
for (m, L), r in zip(specs, measured):
    pred = tokens_per_call(tokens, [expected_calls(path_survival(p.ratios, L, m)) for p in paths])
    rows.append(dict(method=m, L=L, predicted=pred.mean, se=pred.standard_error, measured=r["tokens_per_call"],
                     measured_se=r["measured_standard_error"], error=pred.mean / r["tokens_per_call"] - 1))
    print(rows[-1], flush=True)
json.dump(rows, open("docs/results/tune_calls.json", "w"), indent=1)
