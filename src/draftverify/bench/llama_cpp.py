"""llama.cpp on the same GGUF file: the anchor a CPU user compares us with (issue 27).

``llama-cpp-python`` is an optional extra (``pip install draftverify[llama]``, a C++ build of about
ten minutes); without it ``bench speed`` leaves these rows out and says so. llama.cpp streams the
GGUF's own quantized weights (SmolLM2's file: Q4_1, about 4.5 bits a weight), so its rows compare
engines *and* weight formats: ours run the float32 or the int8 model (``--quantize``).

A run is timed as ours are: one prompt, from the prompt's tokens (the same ids, encoded by our
tokenizer, which the GGUF's vocabulary shares) to ``max_new_tokens`` sampled tokens, the prefill
included and EOS ignored (llama-cpp-python's ``Llama.generate`` samples until its caller stops).
Sampling: llama.cpp's sampler chain with every filter off (top-k 0, top-p 1, min-p 0, no repeat
penalty) at the given temperature; temperature 0 is its greedy sampler. The KV cache is reset
before every run, so no run reuses a previous run's prompt.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

__all__ = ["LlamaCpp", "available"]


def available() -> bool:
    """Whether ``llama-cpp-python`` is installed."""
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaCpp:
    """One llama.cpp model of ``gguf_file`` with a context of ``context`` tokens on ``threads`` threads."""

    def __init__(self, gguf_file: str | Path, *, context: int, threads: int, seed: int = 0):
        from llama_cpp import Llama

        self.model = Llama(model_path=str(gguf_file), n_ctx=context, n_batch=min(context, 512), n_threads=threads,
                           n_threads_batch=threads, seed=seed, verbose=False)

    def decode(self, prompt_ids: list[int], *, max_new_tokens: int, temperature: float, seed: int) -> dict[str, float]:
        """Tokens and seconds of one run (module doc), and those of its first token (``first_*``)."""
        self.model.reset()
        self.model.set_seed(seed)
        tokens, first = 0, 0.0
        start = time.perf_counter()
        for _ in self.model.generate(prompt_ids, top_k=0, top_p=1.0, min_p=0.0, temp=temperature, repeat_penalty=1.0):
            tokens += 1
            first = first or time.perf_counter() - start  # the prefill and the first token
            if tokens == max_new_tokens:
                break
        return dict(tokens=tokens, seconds=time.perf_counter() - start, first_tokens=1, first_seconds=first)
