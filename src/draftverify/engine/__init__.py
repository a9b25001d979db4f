"""The decoding engine: draft -> score -> verify -> commit, with caches, statistics and streaming."""

from .config import AR, PREFIX_DRAFT_ONLY, DecodeConfig, refuses_draft
from .decoder import Decoder, RowStep
from .generate import generate, generate_batch, stream
from .stats import GenerationResult, StepStats

__all__ = ["AR", "PREFIX_DRAFT_ONLY", "DecodeConfig", "refuses_draft", "Decoder", "RowStep", "generate", "generate_batch", "stream", "GenerationResult", "StepStats"]
