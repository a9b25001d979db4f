"""load_pair: paths, the n-gram drafter, vocabulary checks, missing files."""

from __future__ import annotations

import pytest
import torch

from draftverify.engine import generate
from draftverify.models import pair as pair_module
from draftverify.models.ngram import NGramDrafter
from draftverify.models.pair import NGramModel, load_ngram_draft, load_pair
from draftverify.models.panel_mm import kernel
from draftverify.models.toy import char_tokenizer, tiny_causal_lm


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    tokenizer = char_tokenizer()
    vocab = len(tokenizer)
    for name, width, layers, size in [("target", 32, 2, vocab), ("draft", 16, 1, vocab), ("wide", 16, 1, vocab + 3)]:
        tiny_causal_lm(size, width=width, layers=layers, seed=len(name), dtype=torch.float32).save_pretrained(root / name)
    tokenizer.save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "tokenizer")
    NGramDrafter.train([tokenizer.encode("def add(a, b):\n    return a + b\n") * 3], vocab, order=3).save(root / "ngram")
    other = char_tokenizer("zyxwvutsrqponmlkjihgfedcba .,:()=+\n")  # same size, other ids
    tiny_causal_lm(vocab, width=16, layers=1, dtype=torch.float32).save_pretrained(root / "other")
    other.save_pretrained(root / "other")
    return root


def test_paths_load_and_decode(folders):
    pair = load_pair(folders / "target", folders / "draft")
    prompt = pair.tokenizer.encode("def f(")
    result = generate(pair.target, pair.draft, prompt, "bv", max_new_tokens=8, tokenizer=pair.tokenizer)
    assert len(result.tokens) <= 8 and isinstance(result.text, str)


def test_quantize_int8_makes_the_target_stream_a_quarter_of_the_bytes(folders):
    full, int8 = (load_pair(folders / "target", folders / "draft", quantize=q).target for q in (None, "int8"))
    assert int8.product_bytes < 0.3 * full.product_bytes
    prompt = torch.tensor([full.tokenizer.encode("def f(")])
    logits = [model.forward(model.new_cache(1), prompt, None, 1) for model in (full, int8)]
    assert not torch.equal(*logits)  # the int8 model's law, close to the float32 one
    torch.testing.assert_close(*logits, atol=0.05, rtol=0)


def test_embedded_layout_and_ngram_draft(folders, monkeypatch):
    monkeypatch.setattr(pair_module, "ASSETS", folders)
    pair = load_pair("tiny", draft="ngram")
    assert isinstance(pair.draft, NGramModel) and pair.draft_name == "ngram"
    contexts = [pair.tokenizer.encode("def add(a"), pair.tokenizer.encode("x")]
    torch.testing.assert_close(pair.draft.next_token_logits(contexts).exp(), pair.draft.drafter.next_token_probs(contexts))
    assert load_pair("tiny").draft_name == "draft"


def test_named_pairs_pick_their_own_ngram_file_and_folder_targets_name_one(folders, monkeypatch, tmp_path):
    from draftverify.models import gguf

    tokenizer = char_tokenizer()
    NGramDrafter.train([tokenizer.encode("return a + b\n")], len(tokenizer), order=2).save(tmp_path / "smollm2-ngram")
    monkeypatch.setattr(gguf, "converted_folder", lambda path=None: folders / "target")  # a smollm2-like target
    monkeypatch.setattr(pair_module, "SMOLLM2_NGRAM", tmp_path / "smollm2-ngram")
    monkeypatch.setattr(pair_module, "ASSETS", folders)
    for target in (None, "smollm2"):
        pair = load_pair(target, "ngram")
        assert pair.draft_name == "ngram" and pair.draft.drafter.order == 2  # the default pair's, not the tiny one
        assert pair.target.weight_format == "float32"  # weights that are no GGML blocks: float32 by default
    if "avx512" in kernel().isas:  # asked for, the blocks they are not are an error
        with pytest.raises(ValueError, match="not exactly GGML"):
            load_pair(None, "ngram", quantize="gguf")
    assert load_pair("tiny", "ngram").draft.drafter.order == 3
    assert load_ngram_draft(pair.target).drafter.order == 2
    assert load_ngram_draft(pair.target, target_name="tiny").drafter.order == 3
    # a file or folder target has no n-gram drafter of its own: it names one's folder (load_draft reads it)
    for target in (tmp_path / "model.gguf", folders / "target"):
        with pytest.raises(ValueError, match="no n-gram drafter of its own: name one's folder"):
            load_pair(target, "ngram")
    named = load_pair(folders / "target", tmp_path / "smollm2-ngram")
    assert isinstance(named.draft, NGramModel) and named.draft.drafter.order == 2


def test_a_failed_conversion_reports_without_waiting_for_the_kernel_build(monkeypatch, tmp_path):
    """load_pair builds the kernel in a thread while the GGUF converts; a conversion that fails
    raises at once, not after the build (which finishes in its thread)."""
    import threading

    from draftverify.models import gguf, panel_mm

    started, release, finished = threading.Event(), threading.Event(), []

    def slow_build():
        started.set()
        release.wait(30)  # a build that outlasts the conversion
        finished.append(True)

    def failing_conversion(path=None):
        started.wait(30)
        raise FileNotFoundError(f"{path}: no such GGUF file")

    monkeypatch.setattr(panel_mm, "kernel", slow_build)
    monkeypatch.setattr(gguf, "converted_folder", failing_conversion)
    try:
        with pytest.raises(FileNotFoundError, match="no such GGUF file"):
            load_pair(tmp_path / "absent.gguf")
        assert not finished  # raised while the build was still running
    finally:
        release.set()


def test_the_shipped_default_pair_ngram_speaks_its_vocabulary():
    drafter = NGramDrafter.load(pair_module.SMOLLM2_NGRAM)
    assert drafter.vocab_size == 49152 and drafter.order == 4  # SmolLM2's tokenizer
    probs = drafter.next_token_probs([[1, 2, 3]])
    assert probs.shape == (1, 49152) and abs(float(probs.sum()) - 1) < 1e-4


def test_vocabulary_mismatch_is_a_value_error(folders):
    with pytest.raises(ValueError, match="vocabulary"):
        load_pair(folders / "target", folders / "wide")
    with pytest.raises(ValueError, match="own tokenizer"):
        load_pair(folders / "target", folders / "other")


def test_a_hub_id_is_a_value_error_at_once():
    with pytest.raises(ValueError, match="'gpt2': no such folder; models must be local paths"):
        load_pair("gpt2")


def test_missing_files_are_file_not_found(folders, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        load_pair(folders / "target", tmp_path / "nothing" / "here")
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        load_pair(folders / "draft", folders / "draft")  # a target folder without a tokenizer
    monkeypatch.setattr(pair_module, "ASSETS", tmp_path)
    with pytest.raises(FileNotFoundError, match="train-pair"):
        load_pair("tiny")


def test_named_pairs_and_drafts_that_do_not_fit(folders, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="no draft of its own"):
        load_pair(folders / "target")
    with pytest.raises(ValueError, match="vocabulary"):  # a folder target with an n-gram drafter of another vocabulary
        load_pair(folders / "wide", folders / "ngram", tokenizer=folders / "tokenizer")
