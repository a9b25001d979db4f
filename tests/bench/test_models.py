"""The benchmarks' model settings: both draft kinds load (``bench decode --drafts draft ngram``
crashed on a hand-built Namespace), and bad kinds are refused by name."""

from __future__ import annotations

import pytest

from draftverify.bench.models import ModelSettings, load_models


def test_both_draft_kinds_load_with_the_target_vocabulary():
    target, drafts, tokenizer = load_models(ModelSettings(target="tiny", drafts=("draft", "ngram")))
    assert sorted(drafts) == ["draft", "ngram"]
    assert all(model.vocab_size == target.vocab_size for model in drafts.values())
    assert tokenizer.decode(tokenizer.encode("def f(x):")) == "def f(x):"


def test_the_ngram_drafter_alone_loads_without_the_transformer_draft():
    _, drafts, _ = load_models(ModelSettings(target="tiny", drafts=("ngram",)))
    assert list(drafts) == ["ngram"]


@pytest.mark.parametrize("settings,message", [
    (dict(drafts=("draft", "lstm")), "drafts: expected kinds among draft, ngram, assistant, got draft, lstm"),
    (dict(drafts=()), "drafts: expected kinds among draft, ngram, assistant, got none"),
    (dict(drafts=("ngram",), tiny=True), "the tiny models have no n-gram drafter"),
    (dict(quantize="int4"), "quantize must be None or one of"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ModelSettings(**settings)
