"""The decoding engine: draft -> score -> verify -> commit, with caches, statistics and streaming."""

from .config import AR, DecodeConfig
from .decoder import Decoder, RowStep
from .generate import generate, generate_batch, stream
from .stats import GenerationResult, StepStats

__all__ = ["AR", "DecodeConfig", "Decoder", "RowStep", "generate", "generate_batch", "stream", "GenerationResult", "StepStats"]
