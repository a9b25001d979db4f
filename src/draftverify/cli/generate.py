"""`draftverify generate "prompt"`: stream a completion, then a footer with acceptance and speed."""

from __future__ import annotations

import argparse
import sys
import time

from ..verify.acceptance import pooled_acceptance, rejected_tests
from ._options import method_from_args

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("generate", help="generate text with draft-then-verify decoding (default: the embedded pair)")
    parser.add_argument("prompt", help="the prompt text")
    parser.add_argument("--method", default="bv",
                        help="'ar' or a verifier (see `draftverify list`), e.g. bv, ot(solver=gr,tol=1e-4), kseq(K=4); default bv")
    parser.add_argument("--drafts", type=int, default=None, help="K, number of i.i.d. drafts (default 1)")
    parser.add_argument("--draft-length", type=int, default=None, help="L, tokens per draft (default 4)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a verifier option, same as inside --method's parentheses, e.g. --option fraction=0.5 (repeatable)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default=None, help="target model folder or hub id (default: embedded)")
    parser.add_argument("--draft", default=None, help="draft model folder, hub id, or 'ngram' (default: embedded)")
    parser.add_argument("--compare-ar", action="store_true", help="also time plain target sampling and report the speedup")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise ValueError("the prompt is empty")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    from ..engine import DecodeConfig, Decoder
    from ..engine.generate import generate
    from ..models.pair import load_pair

    settings = dict(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        max_new_tokens=args.max_new_tokens, stop=tuple(args.stop), seed=args.seed,
    )
    method = method_from_args(args.method, args.option)
    config = DecodeConfig(method.name, num_drafts=args.drafts if method.num_drafts is None else method.num_drafts,
                          draft_length=args.draft_length if method.draft_length is None else method.draft_length,
                          options=method.options, **settings)  # bad options fail before loading
    pair = load_pair(args.target, args.draft or method.draft)
    prompt_ids = pair.tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise ValueError("the prompt encodes to no tokens")
    draft = pair.draft if config.speculative else None
    Decoder(pair.target, draft, [prompt_ids], config)  # validates prompt and vocabularies up front
    # warm-up (one-time allocations), not timed
    generate(pair.target, pair.draft, prompt_ids, "ar", max_new_tokens=2)

    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    decoder = Decoder(pair.target, draft, [prompt_ids], config, tokenizer=pair.tokenizer)
    start, shown, steps = time.perf_counter(), "", []
    while not decoder.done:
        steps.extend(row.stats for row in decoder.step())
        text = pair.tokenizer.decode(decoder.generated(0), skip_special_tokens=True)
        sys.stdout.write(text[len(shown):])
        sys.stdout.flush()
        shown = text
    seconds = time.perf_counter() - start
    num_tokens = len(decoder.generated(0))
    target_calls = sum(s.target_calls for s in steps)
    footer = [f"method {config.name}", f"{num_tokens} tokens", f"{num_tokens / seconds:.1f} tokens/s",
              f"{num_tokens / max(target_calls, 1):.2f} tokens/target call"]
    if config.speculative:
        accepted = sum(s.accepted for s in steps)
        acceptance = pooled_acceptance(accepted, rejected_tests((s.accepted for s in steps), config.length)) or 0.0
        footer.insert(1, f"acceptance {acceptance:.2f} (K={config.drafts}, L={config.length})")
    if args.compare_ar:
        ar = generate(pair.target, None, prompt_ids, "ar", tokenizer=pair.tokenizer, **settings)
        footer.append(f"ar {ar.tokens_per_second:.1f} tokens/s -> speedup {num_tokens / seconds / ar.tokens_per_second:.2f}x")
    print("\n\n-- " + " | ".join(footer))
    return 0
