"""The real target's draft: teacher answers, the bucketed and subset losses, initialisation and resuming."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from draftverify.models import TransformersModel
from draftverify.models.toy import char_tokenizer, tiny_causal_lm
from draftverify.train.draft import DraftConfig, bucket_losses, distill_draft, draft_model, load_shards, subset_losses
from draftverify.train.draft_pipeline import train_draft
from draftverify.train.feature_draft import FeatureDraftConfig, frequent_tokens
from draftverify.train.teacher import TeacherConfig, answer_batch, chat_prompts


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("target")
    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}:"
    tiny_causal_lm(len(tokenizer), arch="llama", width=32, dtype=torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_bucket_losses_are_zero_for_the_teacher_itself_and_bounded():
    logits = torch.randn(5, 12)
    probs = torch.softmax(logits, -1)
    top = torch.topk(probs, 4, -1)
    cross_entropy, variation = bucket_losses(logits, top.indices, top.values)
    rest = 1 - top.values.sum(1)
    entropy = -(top.values * top.values.log()).sum(1) - rest * rest.log()
    torch.testing.assert_close(cross_entropy, entropy.mean())  # the bucketed entropy: its minimum
    assert float(variation) < 1e-6
    outside = torch.full((5, 12), -1e4).scatter(1, top.indices, -2e4)  # the draft's mass off the teacher's top-4
    _, far = bucket_losses(outside, top.indices, top.values)
    torch.testing.assert_close(far, (1 - rest).mean())  # TV = 1/2 (sum_k T_k + |r - 1|) = 1 - r


def test_subset_losses_read_the_target_law_on_the_subset_and_count_its_mass_outside():
    torch.manual_seed(0)
    target = torch.softmax(torch.randn(5, 12), -1)
    subset = torch.tensor([0, 2, 3, 5, 7, 8, 10, 11])
    on_subset = target[:, subset]  # [5, 8]
    mass = on_subset.sum(1)
    cross_entropy, variation = subset_losses(on_subset.log(), on_subset)  # the draft: the target renormalised on the subset
    torch.testing.assert_close(variation, (1 - mass).mean())  # sum min(T, D) = the target's mass on the subset
    torch.testing.assert_close(cross_entropy, -(on_subset * (on_subset / mass[:, None]).log()).sum(1).mean())
    logits = on_subset.log().requires_grad_()
    subset_losses(logits, on_subset)[0].backward()
    assert logits.grad.abs().max() < 1e-6  # the cross-entropy's minimum: the renormalised target
    _, uniform = subset_losses(torch.zeros(5, 8), on_subset)
    torch.testing.assert_close(uniform, 1 - torch.minimum(on_subset, torch.full_like(on_subset, 1 / 8)).sum(1).mean())
    # with a bucket: the cross-entropy of the target's 3 most probable tokens and one bucket, the variation exact
    logits = torch.randn(5, 8)
    top = torch.topk(on_subset, 3, -1)
    bucketed, exact = subset_losses(logits, on_subset, 3)
    torch.testing.assert_close(bucketed, bucket_losses(logits, top.indices, top.values)[0])
    torch.testing.assert_close(exact, subset_losses(logits, on_subset)[1])
    with pytest.raises(ValueError, match="bucket"):
        FeatureDraftConfig(vocab=12, bucket=12)  # the bucket would hold only what the draft cannot reach


def test_answers_come_with_the_law_they_were_drawn_from(target_folder):
    target = TransformersModel.from_pretrained(target_folder)
    prompts = [target.tokenizer.encode("def add(a"), target.tokenizer.encode("x")]
    answered = answer_batch(target, prompts, 6, target.eos_token_id, 3, torch.Generator().manual_seed(0))
    answers, ids, probs = answered.tokens, answered.top_ids, answered.top_probs
    assert ids.shape == probs.shape == (2, len(max(answers, key=len)), 3)
    cache = target.new_cache(1)  # the second row alone, teacher-forced: the same top-3
    logits = target.forward(cache, torch.tensor([prompts[1] + answers[1][:-1]]), num_logits=len(answers[1]))[0]
    expected = torch.topk(torch.softmax(logits.double(), -1), 3, -1)
    torch.testing.assert_close(probs[1, : len(answers[1])], expected.values.float(), atol=1e-5, rtol=1e-4)


def test_rows_that_have_answered_leave_the_batch_without_changing_the_others(target_folder):
    """A row that drew eos is fed padding from then on (``answer_batch``): every row's answer, the
    top-k law of each of its tokens and its features are still what a teacher-forced pass over that
    row alone gives, for a row that ends early and rows that run to the length limit."""
    target = TransformersModel.from_pretrained(target_folder)
    prompts = [target.tokenizer.encode(text) for text in ("def add(a", "x", "import os", "y = [")]
    never = answer_batch(target, prompts, 10, -1, 3, torch.Generator().manual_seed(1))
    eos = never.tokens[0][2]  # a token row 0 draws third: some rows end early, at different steps
    answered = answer_batch(target, prompts, 10, eos, 3, torch.Generator().manual_seed(1), features=True)
    lengths = [len(answer) for answer in answered.tokens]
    assert min(lengths) < 10 and max(lengths) == 10, lengths
    for b, (prompt, answer) in enumerate(zip(prompts, answered.tokens)):
        assert eos not in answer[:-1] and (answer[-1] == eos or len(answer) == 10)
        cache = target.new_cache(1)
        with torch.inference_mode():
            logits = target.forward(cache, torch.tensor([prompt + answer[:-1]]), num_logits=len(answer))[0]
            expected = target.model.model(input_ids=torch.tensor([prompt + answer])).last_hidden_state[0]
        law = torch.topk(torch.softmax(logits.double(), -1), 3, -1)
        torch.testing.assert_close(answered.top_probs[b, : len(answer)], law.values.float(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(answered.features[b], expected, atol=2e-3, rtol=2e-3)


def test_each_labelling_batch_draws_with_its_own_seed(target_folder, tmp_path):
    """The same prompts in two batches of a shard get answers of their own: each batch's generator
    is seeded by its first row (one seed for all would deal every batch the same uniforms)."""
    from draftverify.train.teacher import label_shards

    target = TransformersModel.from_pretrained(target_folder)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=8, top_k=4, prompts_per_shard=4)
    assert label_shards(target, ["def f(x):", "a = b"] * 2, tmp_path, teacher, log=lambda _: None) == 1
    rows = load_shards(tmp_path)
    assert any(not np.array_equal(rows[b][0], rows[b + 2][0]) for b in range(2))


def test_labelling_keeps_the_features_of_every_position(target_folder, tmp_path):
    """The features read back from the labelling's cache are the target's final hidden states at
    every position of prompt and answer (a teacher-forced pass of the transformers model), rows of
    different prompt lengths included (left padding in the batch)."""
    from draftverify.train.feature_draft import load_feature_rows, target_laws
    from draftverify.train.teacher import label_shards

    target = TransformersModel.from_pretrained(target_folder)
    prompts = ["def add(a, b):", "x", "import os"]
    teacher = TeacherConfig(batch_size=3, max_new_tokens=7, top_k=4, prompts_per_shard=3)
    assert label_shards(target, prompts, tmp_path, teacher, log=lambda _: None, features=True) == 1
    rows = load_feature_rows(tmp_path)
    assert len(rows) == 3 and len({len(r[0]) for r in rows}) > 1
    for tokens, _, _, _, features in rows:
        with torch.inference_mode():
            ids = torch.from_numpy(tokens.astype(np.int64))[None]
            expected = target.model.model(input_ids=ids).last_hidden_state[0]
        assert features.shape == tuple(expected.shape)
        torch.testing.assert_close(torch.from_numpy(features.astype(np.float32)), expected, atol=2e-3, rtol=2e-3)
        # the feature draft's labels: the target's law over a subset, from the stored features
        subset = torch.tensor([1, 4, 5, 9])
        with torch.inference_mode():
            law = torch.softmax(target.model(input_ids=ids).logits[0].float(), -1)[:, subset]
        stored = torch.from_numpy(features.astype(np.float32))
        torch.testing.assert_close(target_laws(target.model.get_output_embeddings(), stored, subset), law,
                                   atol=1e-3, rtol=1e-2)


def test_the_labels_from_stored_normalizers_are_the_targets_law_on_the_subset(target_folder, tmp_path):
    """``extract_normalizers`` stores, per answer position, the log of the target's softmax
    denominator over its stored features; the labels from the subset's logits and it equal the
    labels from the whole output layer to float32 rounding (a normalizer off by 0.01 is not), each
    shard is done once, and a shard without them is an error."""
    from draftverify.train.feature_draft import extract_normalizers, load_feature_rows, load_normalizers, target_laws
    from draftverify.train.teacher import label_shards

    target = TransformersModel.from_pretrained(target_folder)
    teacher = TeacherConfig(batch_size=3, max_new_tokens=7, top_k=4, prompts_per_shard=3)
    assert label_shards(target, ["def add(a, b):", "x", "import os", "y = 2", "for", "z"], tmp_path, teacher,
                        log=lambda _: None, features=True) == 2
    with pytest.raises(FileNotFoundError, match="normalizers"):
        load_normalizers(tmp_path)
    with pytest.raises(FileNotFoundError, match="no teacher shards with features"):
        load_normalizers(tmp_path / "nothing")  # as load_feature_rows: never an empty list
    assert extract_normalizers(target.model, tmp_path, log=lambda _: None) == 2
    assert extract_normalizers(target.model, tmp_path, log=lambda _: None) == 0  # done once
    rows, normalizers = load_feature_rows(tmp_path), load_normalizers(tmp_path)
    assert len(normalizers) == len(rows) == 6
    output, subset = target.model.get_output_embeddings(), torch.tensor([1, 4, 5, 9, 20])
    for (tokens, start, ids, _, features), stored in zip(rows, normalizers):
        assert stored.shape == (len(ids),) and stored.dtype == np.float32
        answer = torch.from_numpy(features[start - 1: start - 1 + len(ids)].astype(np.float32))
        whole = target_laws(output, answer, subset)
        torch.testing.assert_close(target_laws(output, answer, subset, torch.from_numpy(stored)), whole,
                                   atol=1e-6, rtol=1e-5)
        off = target_laws(output, answer, subset, torch.from_numpy(stored) + 0.01)
        assert not torch.allclose(off, whole, atol=1e-6, rtol=1e-5)
    np.save(tmp_path / "normalizers-00001.npy", np.zeros((3, 2), dtype=np.float32))  # not its shard's shape
    with pytest.raises(ValueError, match="normalizers-00001.npy: normalizers .* delete it"):
        load_normalizers(tmp_path)


def test_labelling_keeps_the_streams_a_fused_draft_reads_from_its_own_forwards(target_folder, tmp_path):
    """With ``streams`` the answers' and the source windows' shards get ``fusion-NNNNN.npy`` from the
    labelling's forwards: the target's residual streams (a truncated transformers pass) at every
    position, the final features unchanged beside them; ``extract_fusion`` then has nothing to do,
    and a folder holding other streams is refused before any labelling."""
    from draftverify.train.feature_draft import extract_fusion, load_feature_rows, residual_streams
    from draftverify.train.teacher import label_shards, label_source_shards

    target = TransformersModel.from_pretrained(target_folder)
    teacher = TeacherConfig(batch_size=3, max_new_tokens=7, top_k=4, prompts_per_shard=3)
    windows = torch.randint(0, target.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0)).tolist()
    assert label_shards(target, ["def add(a, b):", "x", "import os"], tmp_path / "chat", teacher, log=lambda _: None,
                        features=True, streams=(1,)) == 1
    assert label_source_shards(target, windows, tmp_path / "source", teacher, context=5, log=lambda _: None,
                               features=True, streams=(1,)) == 1
    for folder in (tmp_path / "chat", tmp_path / "source"):
        assert extract_fusion(target.model, folder, (1,), log=lambda _: None) == 0  # kept already
        rows = load_feature_rows(folder, (1,))
        assert len(rows) == 3 and len(rows[0]) == 6
        for tokens, _, _, _, features, streams in rows:
            ids = torch.from_numpy(tokens.astype(np.int64))[None]
            with torch.inference_mode():
                final = target.model.model(input_ids=ids).last_hidden_state[0]
            expected = residual_streams(target.model, ids, (1,))[0]
            assert streams.shape == tuple(expected.shape) and not np.array_equal(streams, features)
            torch.testing.assert_close(torch.from_numpy(streams.astype(np.float32)), expected, atol=2e-3, rtol=2e-3)
            torch.testing.assert_close(torch.from_numpy(features.astype(np.float32)), final, atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="streams: .* holds the streams after layers \\[1\\], not \\[2\\]"):
        label_shards(TransformersModel.from_pretrained(target_folder), ["y"] * 6, tmp_path / "chat", teacher,
                     features=True, streams=(2,))
    assert len(list((tmp_path / "chat").glob("shard-*.npz"))) == 1  # nothing labelled
    with pytest.raises(ValueError, match="streams: kept with the features only"):
        label_source_shards(target, windows, tmp_path / "x", teacher, context=5, streams=(1,))


def test_the_prompts_come_from_the_standard_library_or_the_installed_packages(target_folder, tmp_path, monkeypatch):
    import sysconfig
    from pathlib import Path

    from draftverify.train import draft_pipeline
    from draftverify.train.teacher import prompt_root

    assert prompt_root("stdlib") is None and prompt_root("packages") == Path(sysconfig.get_paths()["purelib"])
    for bad in (lambda: prompt_root("site"), lambda: TeacherConfig(prompts="site")):
        with pytest.raises(ValueError, match="prompts: one of stdlib, packages, got 'site'"):
            bad()
    asked = []
    monkeypatch.setattr(draft_pipeline, "chat_prompts",
                        lambda split, seed, root=None: asked.append((split, seed, root)) or ["def f(x):"] * 2)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=3, top_k=4, prompts_per_shard=2, seed=5, prompts="packages")
    config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, checkpoint_every=1, calibration=0, fusion=(1,))
    record = train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=1,
                         teacher=teacher, draft=config, log=lambda _: None)
    assert asked == [("train", 5, prompt_root("packages"))] and record["teacher"]["prompts"] == "packages"
    assert (tmp_path / "work" / "teacher" / "fusion-00000.npy").exists()  # the labelling kept the fused streams


def test_a_run_resumes_and_writes_a_loadable_draft(target_folder, tmp_path, monkeypatch):
    from draftverify.train import draft_pipeline

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 4)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=4)
    config = DraftConfig(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, batch_size=2, steps=3,
                         checkpoint_every=1)
    record = train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=1,
                         teacher=teacher, draft=config, log=lambda _: None)
    assert len(list((tmp_path / "work" / "teacher").glob("shard-*.npz"))) == 2 and record["answers"] == 8
    assert record["last_step"]["step"] == 3
    rows = load_shards(tmp_path / "work" / "teacher")
    resumed = distill_draft(draft_model(tiny_causal_lm(len(char_tokenizer()), arch="llama", width=32,
                                                       dtype=torch.float32), config),
                            rows, config, tmp_path / "work" / "draft", log=lambda _: None)
    assert resumed == {"step": 3}  # the checkpoint is at the last step: nothing left to do, that step recorded
    drafted = TransformersModel.from_pretrained(tmp_path / "out")
    assert drafted.vocab_size == len(char_tokenizer())


def test_a_feature_draft_run_extracts_features_trains_and_loads(target_folder, tmp_path, monkeypatch):
    from draftverify.models.feature_draft import FeatureDraft, FeatureHead
    from draftverify.models.pair import load_draft
    from draftverify.train import draft_pipeline

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 2)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=4)
    config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=2, checkpoint_every=1, unroll=2, calibration=2)
    record = train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=1,
                         teacher=teacher, draft=config, log=lambda _: None)
    assert record["last_step"]["step"] == 2
    tau = record["calibration"]["temperature"]
    trained = torch.load(tmp_path / "work" / "draft" / "checkpoint.pt", weights_only=False)["model"]["head.weight"]
    torch.testing.assert_close(FeatureHead.load(tmp_path / "out").head.weight, trained / tau, atol=1e-3, rtol=1e-3)  # folded in
    features = np.load(tmp_path / "work" / "teacher" / "features-00000.npy")
    tokens = np.load(tmp_path / "work" / "teacher" / "shard-00000.npz")["tokens"]
    assert features.shape[:2] == tokens.shape
    target = TransformersModel.from_pretrained(target_folder)
    draft = load_draft(tmp_path / "out", target)
    assert isinstance(draft, FeatureDraft) and len(draft.support) == 12


def test_a_further_feature_stage_starts_from_a_trained_draft_on_more_shards(target_folder, tmp_path, monkeypatch):
    from draftverify.models.feature_draft import FeatureHead
    from draftverify.train import draft_pipeline

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 2)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=4)
    config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, checkpoint_every=1, calibration=0)
    train_draft(target_folder, tmp_path / "first", tmp_path / "stage1", label_minutes=1, train_minutes=1,
                teacher=teacher, draft=config, log=lambda _: None)
    later = FeatureDraftConfig(vocab=12, bucket=4, layers=2, batch_size=2, steps=2, checkpoint_every=1, lr=1e-2, unroll=2, seed=1,
                               calibration=0)
    record = train_draft(target_folder, tmp_path / "second", tmp_path / "stage2", label_minutes=0, train_minutes=1,
                         teacher=teacher, draft=later, extra_shards=(tmp_path / "first" / "teacher",),
                         start=tmp_path / "stage1", log=lambda _: None)
    assert record["answers"] == 4 and record["start"] == str(tmp_path / "stage1") and record["last_step"]["step"] == 2
    before, after = FeatureHead.load(tmp_path / "stage1"), FeatureHead.load(tmp_path / "stage2")
    assert torch.equal(before.vocab, after.vocab)  # the subset is the trained draft's
    assert not torch.equal(before.fc.weight, after.fc.weight)  # trained further
    assert (len(before.layers), len(after.layers)) == (1, 2)  # a layer added (tests/train/test_feature_draft.py)
    with pytest.raises(ValueError, match="start"):
        train_draft(target_folder, tmp_path / "second", tmp_path / "x", label_minutes=0, train_minutes=0,
                    teacher=teacher, draft=DraftConfig(), start=tmp_path / "stage1")
    with pytest.raises(ValueError, match="subset"):
        train_draft(target_folder, tmp_path / "second", tmp_path / "x", label_minutes=0, train_minutes=0,
                    teacher=teacher, draft=FeatureDraftConfig(vocab=10, bucket=4), extra_shards=(tmp_path / "first" / "teacher",),
                    start=tmp_path / "stage1")
    with pytest.raises(ValueError, match="start: it has 2 decoder layers"):
        train_draft(target_folder, tmp_path / "second", tmp_path / "x", label_minutes=0, train_minutes=0,
                    teacher=teacher, draft=FeatureDraftConfig(vocab=12, bucket=4), extra_shards=(tmp_path / "first" / "teacher",),
                    start=tmp_path / "stage2")


def test_the_learning_rate_warms_up_linearly_then_falls_by_a_cosine_to_a_tenth():
    from draftverify.train.draft import set_learning_rate

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    rates = {}
    for warmup, step in ((4, 0), (4, 3), (0, 0), (0, 50), (0, 100)):
        set_learning_rate(optimizer, 2.0, step, warmup, 100)
        rates[warmup, step] = optimizer.param_groups[0]["lr"]
    assert rates[4, 0] == pytest.approx(0.5) and rates[4, 3] == pytest.approx(2.0 * (0.1 + 0.45 * (1 + math.cos(0.03 * math.pi))))
    assert rates[0, 0] == pytest.approx(2.0) and rates[0, 50] == pytest.approx(1.1) and rates[0, 100] == pytest.approx(0.2)


def _labelled_feature_rows(target_folder, tmp_path, monkeypatch, repeats: int = 2, new_tokens: int = 5):
    """Label ``repeats`` copies of two chat prompts with the tiny target (features kept, shards in
    ``tmp_path/work/teacher``): the target and the rows a feature head trains on."""
    from draftverify.train import draft_pipeline
    from draftverify.train.feature_draft import load_feature_rows

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * repeats)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=new_tokens, top_k=4, prompts_per_shard=4)
    train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=0, teacher=teacher,
                draft=FeatureDraftConfig(vocab=12, bucket=4, steps=1, calibration=0), log=lambda _: None)
    return TransformersModel.from_pretrained(target_folder), load_feature_rows(tmp_path / "work" / "teacher")


def _one_step_each(target_folder, tmp_path, monkeypatch, **settings):
    """For each of ``settings`` (a name: the FeatureDraftConfig fields it sets), one training step of
    a new feature head on labelled answers, the same head, batch and noise: (logged figures, how far
    ``fc`` moved) by name."""
    from draftverify.train.feature_draft import new_head, train_feature_head

    target, rows = _labelled_feature_rows(target_folder, tmp_path, monkeypatch)
    done = {}
    for name, fields in settings.items():
        config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, lr=1e-3, warmup=0, unroll=2,
                                    calibration=0, **fields)
        head = new_head(target.model, rows, config)
        before = head.fc.weight.detach().clone()
        torch.manual_seed(0)  # the same noise
        figures = train_feature_head(head, target.model, rows, config, tmp_path / name, log=lambda _: None)
        done[name] = figures, head.fc.weight.detach() - before
    return done


def test_the_feature_regression_weighs_in_the_loss_as_set(target_folder, tmp_path, monkeypatch):
    """``regression`` scales the feature regression in the loss (EAGLE-3 drops it: 0): one step from
    the same head on the same batch lands elsewhere for each weight, the regression logged whatever
    its weight; a weight < 0 or not finite is refused."""
    done = _one_step_each(target_folder, tmp_path, monkeypatch, **{f"w{w}": {"regression": w} for w in (0.0, 1.0, 100.0)})
    assert all(figures["regression"] > 0 for figures, _ in done.values())
    assert not torch.equal(done["w0.0"][1], done["w1.0"][1]) and not torch.equal(done["w1.0"][1], done["w100.0"][1])
    for bad in (-0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="regression: a finite weight >= 0"):
            FeatureDraftConfig(regression=bad)
    with pytest.raises(ValueError, match="warmup"):
        FeatureDraftConfig(warmup=-1)


def test_a_step_on_stored_normalizers_is_the_step_on_the_whole_output_layer(target_folder, tmp_path, monkeypatch):
    """The pipeline stores each shard's normalizers; one training step with them logs the losses of
    the step that computes the whole output layer and moves the weights alike, to float32 rounding;
    normalizers that do not match the rows are refused."""
    from draftverify.train.feature_draft import load_normalizers, new_head, train_feature_head

    target, rows = _labelled_feature_rows(target_folder, tmp_path, monkeypatch)
    shards = tmp_path / "work" / "teacher"
    assert (shards / "normalizers-00000.npy").exists()
    normalizers = load_normalizers(shards)
    config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, lr=1e-3, warmup=0, unroll=2, calibration=0)
    done = []
    shifted = [n + 0.5 for n in normalizers]  # read, not ignored: labels scaled by exp(-0.5) move the losses
    for name, given in (("whole", None), ("stored", normalizers), ("shifted", shifted)):
        head = new_head(target.model, rows, config)
        before = head.fc.weight.detach().clone()
        torch.manual_seed(0)  # the same noise
        figures = train_feature_head(head, target.model, rows, config, tmp_path / name, log=lambda _: None,
                                     normalizers=given)
        done.append((figures, head.fc.weight.detach() - before))
    (whole, moved_whole), (stored, moved_stored), (wrong, _) = done
    for key in ("regression", "cross_entropy", "acceptance"):
        assert stored[key] == pytest.approx(whole[key], rel=1e-5)
    assert wrong["acceptance"] != pytest.approx(whole["acceptance"], rel=1e-3)
    torch.testing.assert_close(moved_stored, moved_whole, atol=1e-6, rtol=1e-4)
    head = new_head(target.model, rows, config)
    for bad in (normalizers[:-1], [n[:-1] for n in normalizers]):
        with pytest.raises(ValueError, match="normalizers: one per row"):
            train_feature_head(head, target.model, rows, config, tmp_path / "bad", log=lambda _: None, normalizers=bad)


def test_a_feature_run_resumed_from_its_checkpoint_trains_as_an_uninterrupted_one(target_folder, tmp_path, monkeypatch):
    """Three steps in one run, and one step then two more resumed from the checkpoint, land on the
    same weights: each step's gradient is its own (a gradient left from the step before, which the
    resumed run does not have, moves them elsewhere) and its batch and noise are drawn by step."""
    from draftverify.train.feature_draft import new_head, train_feature_head

    target, rows = _labelled_feature_rows(target_folder, tmp_path, monkeypatch)
    settings = dict(vocab=12, bucket=4, batch_size=2, lr=1e-2, warmup=0, unroll=2, calibration=0, checkpoint_every=1)
    whole = new_head(target.model, rows, FeatureDraftConfig(steps=3, **settings))
    start = whole.fc.weight.detach().clone()
    train_feature_head(whole, target.model, rows, FeatureDraftConfig(steps=3, **settings), tmp_path / "whole",
                       log=lambda _: None)
    for steps in (1, 3):  # the cosine's first step is lr whatever the length: the same first step
        parts = new_head(target.model, rows, FeatureDraftConfig(steps=steps, **settings))
        figures = train_feature_head(parts, target.model, rows, FeatureDraftConfig(steps=steps, **settings),
                                     tmp_path / "parts", log=lambda _: None)
    assert figures["step"] == 3
    for key, value in whole.state_dict().items():
        torch.testing.assert_close(parts.state_dict()[key], value, atol=1e-6, rtol=1e-5)
    assert not torch.equal(whole.fc.weight, start)


def test_a_steps_logged_acceptance_is_the_heads_teacher_forced_acceptance_on_its_batch(target_folder, tmp_path,
                                                                                       monkeypatch):
    """Without noise, the acceptance a training step logs (1 - its total variation, before the step)
    is the head's teacher-forced acceptance sum_x min(T(x), D(x)) on the answers of the step's batch
    as :func:`.heldout.ahead_acceptance` computes it from a pass of the target over the text (not
    from the stored features: equal to their float16 rounding); with the training-time test over
    three passes it is the mean of the passes, within the range of the drafted-ahead acceptances."""
    import copy

    from draftverify.train.feature_draft import new_head, train_feature_head
    from draftverify.train.heldout import ahead_acceptance

    target, rows = _labelled_feature_rows(target_folder, tmp_path, monkeypatch, repeats=4, new_tokens=6)
    for unroll in (1, 3):
        config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=3, steps=1, warmup=0, noise=0.0, unroll=unroll,
                                    calibration=0)
        head = new_head(target.model, rows, config)
        with torch.no_grad():  # the tiny target's output layer gives near-uniform laws whatever the features: sharpen
            head.head.weight.mul_(30.0)
        before = copy.deepcopy(head).eval()
        logged = train_feature_head(head, target.model, rows, config, tmp_path / f"u{unroll}", log=lambda _: None)
        batch = np.random.default_rng(config.seed * 100_003).choice(len(rows), config.batch_size, replace=False)
        ahead = [torch.cat(per_q) for per_q in zip(*(ahead_acceptance(target, before, rows[i][0][:rows[i][1]],
                                                                      rows[i][0][rows[i][1]:], unroll) for i in batch))]
        if unroll == 1:
            assert logged["acceptance"] == pytest.approx(float(ahead[0].mean()), abs=5e-4)
        else:
            means = [float(values.mean()) for values in ahead]
            assert min(means) - 0.02 <= logged["acceptance"] <= max(means) + 0.02


def test_a_bfloat16_step_computes_the_float32_losses_to_bfloat16_precision(target_folder, tmp_path, monkeypatch):
    """``precision="bfloat16"`` runs the head's layers under autocast (the labels, the output layer and
    the losses stay float32): one step from the same head on the same batch logs the float32 step's
    losses to within bfloat16's rounding, though not to the bit (autocast ran), and moves the
    weights alike."""
    done = _one_step_each(target_folder, tmp_path, monkeypatch, float32={}, bfloat16={"precision": "bfloat16"})
    (full, moved_full), (half, moved_half) = done["float32"], done["bfloat16"]
    for key in ("regression", "cross_entropy", "acceptance"):
        assert half[key] == pytest.approx(full[key], rel=2e-2)
    assert half["cross_entropy"] != full["cross_entropy"]
    assert F.cosine_similarity(moved_half.flatten(), moved_full.flatten(), 0) > 0.9
    with pytest.raises(ValueError, match="precision: float32 or bfloat16"):
        FeatureDraftConfig(precision="float16")


def test_a_fused_stage_grows_the_fusion_from_a_trained_draft_and_computes_the_streams_once(target_folder, tmp_path,
                                                                                          monkeypatch):
    from draftverify.models.feature_draft import FeatureDraft, FeatureHead
    from draftverify.models.pair import load_draft
    from draftverify.train import draft_pipeline
    from draftverify.train.feature_draft import extract_fusion, load_feature_rows, residual_streams, train_feature_head

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 2)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=4)
    plain = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, checkpoint_every=1, calibration=0)
    train_draft(target_folder, tmp_path / "first", tmp_path / "stage1", label_minutes=1, train_minutes=1,
                teacher=teacher, draft=plain, log=lambda _: None)
    shards = tmp_path / "first" / "teacher"
    with pytest.raises(ValueError, match="fusion: .* holds the streams after layers None"):
        load_feature_rows(shards, (1,))  # not extracted yet
    fused = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=2, checkpoint_every=1, lr=1e-2, seed=1, calibration=0,
                               fusion=(1,))
    record = train_draft(target_folder, tmp_path / "second", tmp_path / "stage2", label_minutes=0, train_minutes=1,
                         teacher=teacher, draft=fused, extra_shards=(shards,), start=tmp_path / "stage1",
                         log=lambda _: None)
    assert tuple(record["draft"]["fusion"]) == (1,) and record["last_step"]["step"] == 2
    target = TransformersModel.from_pretrained(target_folder)
    streams = np.load(shards / "fusion-00000.npy")  # [n, S, E] float16, beside the shard's features
    tokens = np.load(shards / "shard-00000.npz")["tokens"]
    expected = residual_streams(target.model, torch.from_numpy(np.maximum(tokens, 0).astype(np.int64)), (1,))
    torch.testing.assert_close(torch.from_numpy(streams.astype(np.float32)), expected, atol=2e-3, rtol=2e-3)
    before, after = FeatureHead.load(tmp_path / "stage1"), FeatureHead.load(tmp_path / "stage2")
    assert before.fusion == () and after.fusion == (1,) and bool(after.fuse.weight.detach().any())  # trained from zero
    draft = load_draft(tmp_path / "stage2", target)
    assert isinstance(draft, FeatureDraft) and target.feature_streams == (1,)
    assert extract_fusion(target.model, shards, (1,), log=lambda _: None) == 0  # computed once
    with pytest.raises(ValueError, match="streams: .* holds the streams after layers \\[1\\]"):
        extract_fusion(target.model, shards, (1, 2), log=lambda _: None)
    with pytest.raises(ValueError, match="start: it fuses the target's streams after layers \\(1,\\)"):
        train_draft(target_folder, tmp_path / "second", tmp_path / "x", label_minutes=0, train_minutes=0,
                    teacher=teacher, draft=plain, extra_shards=(shards,), start=tmp_path / "stage2")
    for head, rows, match in [(after, load_feature_rows(shards), "the head fuses the streams after layers \\(1,\\)"),
                              (before, load_feature_rows(shards, (1,)), "residual streams the head does not read")]:
        with pytest.raises(ValueError, match=f"rows: .*{match}"):  # rows and head must agree on the streams
            train_feature_head(head, target.model, rows, plain, tmp_path / "y", log=lambda _: None)


def test_an_ngram_run_counts_every_shard_folder_and_loads(target_folder, tmp_path, monkeypatch):
    from draftverify.models.pair import load_ngram_draft
    from draftverify.train import draft_pipeline
    from draftverify.train.ngram import NGramConfig

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 2)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=4)
    train_draft(target_folder, tmp_path / "extra", tmp_path / "unused", label_minutes=1, train_minutes=0,
                teacher=teacher, draft=NGramConfig(order=2), log=lambda _: None)  # a second folder of shards
    record = train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=0,
                         teacher=teacher, draft=NGramConfig(order=3), extra_shards=(tmp_path / "extra" / "teacher",),
                         heldout=tmp_path / "extra" / "teacher", log=lambda _: None)
    assert record["kind"] == "ngram" and record["answers"] == 8 and record["ngrams"] > 0
    measured = record["heldout_acceptance"]  # (here on training shards: a held-out folder is any shard folder)
    assert measured["exact"]["positions"] == measured["topk_bound"]["positions"] > 0
    assert 0 < measured["topk_bound"]["mean"] <= measured["exact"]["mean"] <= 1  # top-4 of a vocabulary of more
    target = TransformersModel.from_pretrained(target_folder)
    assert load_ngram_draft(target, tmp_path / "out").drafter.order == 3
    with pytest.raises(ValueError, match="extra_shards"):
        train_draft(target_folder, tmp_path / "work", tmp_path / "llama", label_minutes=0, train_minutes=0,
                    teacher=teacher, draft=DraftConfig(), extra_shards=(tmp_path / "extra" / "teacher",))


def test_the_subset_is_the_most_frequent_answer_tokens():
    rows = [(np.array([9, 0, 1, 1, 1, 4, 2]), 2, None, None), (np.array([0, 4, 4, 3]), 1, None, None),
            (np.array([5, 0, 2]), 2, None, None)]
    # 1: three times, 4: three times, 2: twice, 3: once; 0 ends every prompt (three times) and is not counted
    assert frequent_tokens(rows, 2, 10).tolist() == [1, 4]
    assert frequent_tokens(rows, 1, 10).tolist() == [1]  # a tie goes to the smaller id
    with pytest.raises(ValueError, match="vocab"):
        frequent_tokens(rows, 11, 10)


def test_the_draft_starts_from_the_target_embedding():
    target = tiny_causal_lm(40, arch="llama", width=32, dtype=torch.float32)
    draft = draft_model(target, DraftConfig(hidden=8, layers=1, heads=2, kv_heads=1, intermediate=16))
    embedding = target.get_input_embeddings().weight.detach()
    centred = embedding - embedding.mean(0)
    ours = draft.get_input_embeddings().weight.detach()
    # the projection keeps the centred embedding's 8 leading directions: Gram matrices agree there
    top = torch.linalg.svdvals(centred)[:8]
    torch.testing.assert_close(torch.linalg.svdvals(ours - ours.mean(0)), top, atol=1e-4, rtol=1e-4)


def test_heldout_prompts_are_not_training_prompts():
    train, heldout = set(chat_prompts("train")), set(chat_prompts("heldout"))
    assert train and heldout and not train & heldout


def test_prompts_of_other_sources_leave_out_the_stdlib_heldout_functions(tmp_path):
    from draftverify.train.corpus import split_corpus
    from draftverify.train.teacher import _documented_functions

    stdlib = split_corpus()
    vendored = next(f for text in stdlib.read(stdlib.heldout) for f in _documented_functions(text))
    own = 'def scale(x, factor=2):\n    """Multiply x by factor."""\n    return x * factor'
    package = tmp_path / "pkg"
    package.mkdir()
    for i in range(40):  # enough files that both sides of the split by file hold some
        (package / f"m{i}.py").write_text(own.replace("scale", f"scale{i}") + "\n\n\n" + vendored["source"] + "\n")
    prompts = chat_prompts("train", seed=3, root=package) + chat_prompts("heldout", seed=3, root=package)
    assert len(prompts) == 40 and all("scale" in p for p in prompts)  # each file's own function, no vendored copy
    assert not any(vendored["source"] in p or f"`{vendored['name']}(" in p for p in prompts)


def _package(root, files: int = 40):
    """``files`` small source files under ``root``, enough that both sides of the split by file hold some."""
    root.mkdir()
    for i in range(files):
        (root / f"m{i}.py").write_text("".join(f"def f{i}_{j}(x):\n    return x + {j}\n" for j in range(12)))
    return root


def test_source_windows_are_runs_of_one_split_files_tokens(tmp_path, monkeypatch):
    from draftverify.train import teacher
    from draftverify.train.corpus import split_corpus

    split = split_corpus(_package(tmp_path / "pkg"))
    monkeypatch.setattr(teacher, "split_corpus", lambda: split)
    tokenizer = char_tokenizer()
    for name, files in (("train", split.train), ("heldout", split.heldout)):
        texts = [tokenizer.encode(t) for t in split.read(files)]
        windows = teacher.source_windows(tokenizer, name, seed=1, size=50, per_file=3)
        assert windows == teacher.source_windows(tokenizer, name, seed=1, size=50, per_file=3)  # seeded
        assert len(windows) == 3 * len(files) and {len(w) for w in windows} == {50}
        for w in windows:  # each a run of one of this split's files (a file's windows adjacent: none of the other split)
            assert any(any(ids[i: i + 50] == w for i in range(len(ids) - 49)) for ids in texts)
    assert teacher.source_windows(tokenizer, "train", seed=2, size=50) != teacher.source_windows(tokenizer, "train", seed=1, size=50)
    with pytest.raises(ValueError, match="split"):
        teacher.source_windows(tokenizer, "test")


def test_source_labels_are_the_targets_teacher_forced_law_and_features(target_folder, tmp_path):
    """Each window's answer positions carry the target's top-k of the law of that very token given
    the text before it (no shift), and the features of every position."""
    from draftverify.train.feature_draft import load_feature_rows
    from draftverify.train.teacher import label_source_shards

    target = TransformersModel.from_pretrained(target_folder)
    windows = torch.randint(0, target.vocab_size, (4, 12), generator=torch.Generator().manual_seed(0)).tolist()
    teacher = TeacherConfig(batch_size=3, top_k=4, prompts_per_shard=2)
    assert label_source_shards(target, windows, tmp_path, teacher, context=5, log=lambda _: None, features=True) == 2
    assert label_source_shards(target, windows, tmp_path, teacher, context=5, log=lambda _: None) == 0  # resumed: done
    rows = load_feature_rows(tmp_path)
    assert [r[0].tolist() for r in rows] == windows
    for tokens, start, ids, probs, features in rows:
        assert start == 5 and ids.shape == probs.shape == (7, 4)
        with torch.inference_mode():
            hidden = target.model.model(input_ids=torch.tensor([tokens.tolist()])).last_hidden_state[0]
            law = torch.softmax(target.model.lm_head(hidden).double(), -1)[start - 1: -1]  # predicting tokens 5..11
        top = torch.topk(law, 4, -1)
        assert torch.equal(torch.from_numpy(ids).long(), top.indices)
        torch.testing.assert_close(torch.from_numpy(probs.astype(np.float32)), top.values.float(), atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(torch.from_numpy(features.astype(np.float32)), hidden, atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="context"):
        label_source_shards(target, windows, tmp_path / "x", teacher, context=12)
    with pytest.raises(ValueError, match="windows"):
        label_source_shards(target, [[1, 2, 3], [1, 2]], tmp_path / "x", teacher)


def test_a_feature_draft_run_trains_on_its_source_windows_too(target_folder, tmp_path, monkeypatch):
    from draftverify.train import draft_pipeline

    monkeypatch.setattr(draft_pipeline, "chat_prompts", lambda split, seed, root=None: ["def f(x):", "a = b"] * 2)
    windows = [[i % 20 for i in range(40)]] * 6  # the context is 32 tokens
    monkeypatch.setattr(draft_pipeline, "source_windows", lambda tokenizer, seed: windows)
    teacher = TeacherConfig(batch_size=2, max_new_tokens=5, top_k=4, prompts_per_shard=2)
    config = FeatureDraftConfig(vocab=12, bucket=4, batch_size=2, steps=1, checkpoint_every=1, calibration=0)
    record = train_draft(target_folder, tmp_path / "work", tmp_path / "out", label_minutes=1, train_minutes=1,
                         source_minutes=1, teacher=teacher, draft=config, log=lambda _: None)
    assert record["shard_folders"] == [str(tmp_path / "work" / "teacher"), str(tmp_path / "work" / "source")]
    assert record["answers"] == 4 + 6 and len(list((tmp_path / "work" / "source").glob("shard-*.npz"))) == 3
    with pytest.raises(ValueError, match="source_minutes"):
        train_draft(target_folder, tmp_path / "work", tmp_path / "x", label_minutes=0, train_minutes=0, source_minutes=1,
                    teacher=teacher, draft=DraftConfig())
