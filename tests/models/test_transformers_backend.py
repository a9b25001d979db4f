"""The transformers backend: ragged rows, crop and reindex give the logits of each row alone, with
the static and the dynamic KV cache (GPT-2 runs the lean forward, compared here with the model's own)."""

from __future__ import annotations

import pytest
import torch

from draftverify.models.hf import TransformersModel, resolve_model_path
from draftverify.models.toy import char_tokenizer, tiny_causal_lm


def alone(model, tokens: list[int], last: int) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -last:]


# (architecture, KV cache): GPT-2 and Llama run the lean forwards, Qwen2 the model's own
BACKENDS = [("gpt2", "static"), ("gpt2", "dynamic"), ("llama", "static"), ("llama", "dynamic"), ("qwen2", "dynamic")]


@pytest.mark.parametrize("arch,kv_cache", BACKENDS)
def test_ragged_batch_crop_and_reindex_match_single_rows(arch, kv_cache):
    raw = tiny_causal_lm(40, arch=arch, seed=1)
    model = TransformersModel(raw, kv_cache=kv_cache)
    cache = model.new_cache(2)
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [0, 0, 0, 0, 8, 9, 10]])
    valid = torch.arange(7)[None, :] >= torch.tensor([[0], [4]])
    out = model.forward(cache, tokens, valid, num_logits=2)
    torch.testing.assert_close(out[0], alone(raw, [1, 2, 3, 4, 5, 6, 7], 2))
    torch.testing.assert_close(out[1], alone(raw, [8, 9, 10], 2))

    model.crop(cache, torch.tensor([5, 2]))  # rejections: rows keep different lengths
    assert model.backend_length(cache) == cache.tokens.shape[1] == 6
    out = model.forward(cache, torch.tensor([[11, 12], [13, 14]]), num_logits=2)
    torch.testing.assert_close(out[0], alone(raw, [1, 2, 3, 4, 5, 11, 12], 2))
    torch.testing.assert_close(out[1], alone(raw, [8, 9, 13, 14], 2))

    model.reindex(cache, torch.tensor([1, 1, 0]))  # replicate a row (K drafts), reorder
    out = model.forward(cache, torch.tensor([[20], [21], [22]]))
    for row, tokens_alone in enumerate([[8, 9, 13, 14, 20], [8, 9, 13, 14, 21], [1, 2, 3, 4, 5, 11, 12, 22]]):
        torch.testing.assert_close(out[row, 0], alone(raw, tokens_alone, 1)[0])
    assert model.backend_length(cache) == cache.tokens.shape[1]


@pytest.mark.parametrize("kv_cache", ["static", "dynamic"])
def test_context_limit_is_a_value_error(kv_cache):
    model = TransformersModel(tiny_causal_lm(20, max_positions=8), kv_cache=kv_cache)
    with pytest.raises(ValueError, match="context of 8"):
        model.forward(model.new_cache(1), torch.ones(1, 9, dtype=torch.int64))
    cache = model.new_cache(1)
    model.forward(cache, torch.ones(1, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="context of 8"):  # the tree of K drafts counts one draft
        model.score_drafts(cache, torch.ones(1, 1, dtype=torch.int64), None, torch.ones(1, 2, 3, dtype=torch.int64))


def test_resolve_model_path(tmp_path):
    assert resolve_model_path(tmp_path) == str(tmp_path)
    for hub_id in ("gpt2", "openai-community/gpt2"):
        with pytest.raises(ValueError, match=f"'{hub_id}': no such folder; models must be local paths"):
            resolve_model_path(hub_id)
    with pytest.raises(FileNotFoundError):
        resolve_model_path(tmp_path / "missing" / "model")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="found a file"):
        resolve_model_path(tmp_path / "file.txt")


def test_from_pretrained_loads_model_and_tokenizer(tmp_path):
    tokenizer = char_tokenizer()
    tiny_causal_lm(len(tokenizer), arch="llama", dtype=torch.float32).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = TransformersModel.from_pretrained(tmp_path)
    assert model.vocab_size == len(tokenizer) and model.eos_token_id == tokenizer.eos_token_id
    assert model.tokenizer.decode(model.tokenizer.encode("ab c")) == "ab c"
    with pytest.raises(FileNotFoundError, match="cannot load"):
        TransformersModel.from_pretrained(tmp_path / "..")  # a folder without a model


def test_a_hub_id_fails_before_transformers_is_asked(monkeypatch):
    import transformers

    def no_network(*args, **kwargs):
        raise AssertionError("from_pretrained was called: a hub id would have gone to the network")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_network)
    with pytest.raises(ValueError, match="models must be local paths"):
        TransformersModel.from_pretrained("org/model")


@pytest.mark.parametrize("arch,kv_cache", BACKENDS)
def test_tree_scoring_of_k_drafts_matches_each_draft_alone(arch, kv_cache):
    raw = tiny_causal_lm(40, arch=arch, seed=3)
    model = TransformersModel(raw, kv_cache=kv_cache)
    cache = model.new_cache(2)
    model.forward(cache, torch.tensor([[1, 2, 3, 4], [0, 0, 5, 6]]), torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]]).bool())
    model.crop(cache, torch.tensor([3, 2]))  # row 0 holds [1, 2, 3], row 1 holds [5, 6]
    held = [[1, 2, 3], [5, 6]]
    pending, pending_valid = torch.tensor([[7, 8], [0, 9]]), torch.tensor([[True, True], [False, True]])
    drafts = torch.tensor([[[10, 11, 12], [13, 14, 15]], [[16, 17, 18], [19, 20, 21]]])  # [B=2, K=2, L=3]
    logits = model.score_drafts(cache, pending, pending_valid, drafts)
    assert logits.shape == (2, 2, 4, 40)
    prefixes = [held[0] + [7, 8], held[1] + [9]]
    for b in range(2):
        for k in range(2):
            torch.testing.assert_close(logits[b, k], alone(raw, prefixes[b] + drafts[b, k].tolist(), 4))

    model.keep_draft(cache, torch.tensor([1, 0]), torch.tensor([2, 0]))  # row 0: draft 1, 2 tokens
    assert cache.row(0) == prefixes[0] + [13, 14] and cache.row(1) == prefixes[1]
    assert model.backend_length(cache) == cache.tokens.shape[1]
    out = model.forward(cache, torch.tensor([[30], [31]]))
    torch.testing.assert_close(out[0, 0], alone(raw, prefixes[0] + [13, 14, 30], 1)[0])
    torch.testing.assert_close(out[1, 0], alone(raw, prefixes[1] + [31], 1)[0])


def test_gpt2_and_llama_take_the_static_cache_by_default_and_other_models_the_dynamic_one():
    # the gpt2 and llama cases of the tests above compare the lean forwards with the models' own
    assert TransformersModel(tiny_causal_lm(20, arch="gpt2")).kv_cache == "static"
    assert TransformersModel(tiny_causal_lm(20, arch="llama")).kv_cache == "static"
    assert TransformersModel(tiny_causal_lm(20, arch="qwen2")).kv_cache == "dynamic"
    with pytest.raises(ValueError, match="GPT-2 and Llama models only"):
        TransformersModel(tiny_causal_lm(20, arch="qwen2"), kv_cache="static")
    with pytest.raises(ValueError, match="kv_cache"):
        TransformersModel(tiny_causal_lm(20), kv_cache="paged")
