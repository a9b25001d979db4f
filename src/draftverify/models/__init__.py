"""Language models behind one protocol: transformers backend, toy known-law models, n-gram drafter."""

from .base import Cache, HistoryModel, LanguageModel
from .hf import TransformersModel
from .pair import ModelPair, NGramModel, load_pair
from .toy import ToyModel

__all__ = ["Cache", "HistoryModel", "LanguageModel", "ModelPair", "NGramModel", "ToyModel", "TransformersModel", "load_pair"]
