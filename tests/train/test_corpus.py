"""The corpus split: deterministic, by file, disjoint, without test folders."""

from __future__ import annotations

import pytest

from draftverify.train.corpus import corpus_files, is_heldout, split_corpus


@pytest.fixture()
def fake_stdlib(tmp_path):
    for name in ["a.py", "b.py", "pkg/__init__.py", "pkg/mod.py", "pkg/tests/t.py", "test/x.py",
                 "site-packages/z.py", "test_top.py", "notes.txt"] + [f"m{i}.py" for i in range(60)]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    return tmp_path


def test_files_sorted_and_filtered(fake_stdlib):
    names = corpus_files(fake_stdlib)
    assert names == sorted(names)
    assert {"a.py", "b.py", "pkg/__init__.py", "pkg/mod.py"} <= set(names)
    assert not any(n.startswith(("test/", "site-packages/")) or "/tests/" in n or
                   n.startswith("test_") for n in names)
    assert len(names) == 64


def test_split_is_deterministic_disjoint_and_by_hash(fake_stdlib):
    first, second = split_corpus(fake_stdlib), split_corpus(fake_stdlib)
    assert first == second
    assert set(first.train).isdisjoint(first.heldout)
    assert sorted(first.train + first.heldout) == corpus_files(fake_stdlib)
    assert all(is_heldout(n, 5.0) for n in first.heldout)
    # a file's side depends on its own name only: adding files does not move it
    (fake_stdlib / "zzz_new.py").write_text("x = 1\n")
    grown = split_corpus(fake_stdlib)
    assert set(first.heldout) <= set(grown.heldout) and set(first.train) <= set(grown.train)
    assert first.read(first.heldout[:1]) == [f"# {first.heldout[0]}\n"]


def test_heldout_fraction_and_options(fake_stdlib):
    everything = [f"f{i}.py" for i in range(4000)]
    fraction = sum(is_heldout(n, 5.0) for n in everything) / len(everything)
    assert 0.04 < fraction < 0.06
    tiny = split_corpus(fake_stdlib, max_files=3)
    assert len(tiny.train) + len(tiny.heldout) == 3 and tiny.heldout and tiny.train
    with pytest.raises(ValueError):
        split_corpus(fake_stdlib, heldout_percent=0)
    with pytest.raises(ValueError):
        split_corpus(fake_stdlib, max_files=1)
    with pytest.raises(FileNotFoundError):
        corpus_files(fake_stdlib / "missing")


def test_real_stdlib_split_is_stable():
    split = split_corpus()
    assert len(split.train) > 100 and 0 < len(split.heldout) < len(split.train) / 5
    assert split == split_corpus()
