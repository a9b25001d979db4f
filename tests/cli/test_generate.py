"""`draftverify generate`: streams text and a footer; bad input is one line and exit code 2."""

from __future__ import annotations

import pytest
import torch

from draftverify.cli import main
from draftverify.models.toy import char_tokenizer, tiny_causal_lm
from tests.factories import save_pair, tiny_lms


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    tokenizer = char_tokenizer()
    save_pair(root, *tiny_lms(len(tokenizer), dtype=torch.float32), tokenizer)
    tiny_causal_lm(len(tokenizer) + 2, width=16, layers=1, seed=1, dtype=torch.float32).save_pretrained(root / "wide")
    return root


def test_streams_text_then_footer_with_speedup(folders, capsys):
    code = main(["generate", "def f(x):", "--method", "bv", "--draft-length", "3", "--max-new-tokens", "12",
                 "--target", str(folders / "target"), "--draft", str(folders / "draft"), "--compare-ar"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("def f(x):")
    footer = out.strip().splitlines()[-1]
    for part in ("method bv", "acceptance", "tokens/s", "tokens/target call", "speedup"):
        assert part in footer


@pytest.mark.parametrize("extra,shown,least", [([], "L=auto", 0), (["--method", "bv(L=3)"], "L=3;", 3),
                                               (["--min-draft-length", "2"], "L=auto", 2), (["--draft-length", "2"], "L=2;", 2)])
def test_the_draft_length_is_auto_unless_given(folders, capsys, extra, shown, least):
    """A fixed L can run below ar (the default pair's GGUF blocks at L = 4: 0.83x); auto, with
    L = 0 among its choices, is the default wherever the method does not write L."""
    code = main(["generate", "def f(x):", "--max-new-tokens", "12", "--target", str(folders / "target"),
                 "--draft", str(folders / "draft"), *extra])
    footer = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0 and shown in footer
    positions = footer.partition("per position ")[2].partition(")")[0].split()  # one rate per position drafted
    if shown == "L=auto":  # the range of the L chosen
        low, _, high = footer.partition("L=auto ")[2].partition(";")[0].partition("..")
        assert int(low) >= least and len(positions) == int(high)
    else:
        assert len(positions) == least


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--method", "nope"], "unknown verifier"),
        (["--method", "sd", "--option", "lam=1"], "does not take"),
        (["--method", "sd", "--option", "validate=maybe"], "option validate expects a bool"),
        (["--method", "ot(tol=abc)"], "option tol expects a float"),
        (["--method", "sd", "--option", "validate"], "is not KEY=VALUE"),
        (["--method", "sd", "--num-drafts", "3"], "takes one draft"),
        (["--method", "kseq(K=3)", "--num-drafts", "2"], "sets K=3 but --num-drafts 2"),
        (["--method", "kseq(K=3)@ngram", "--draft", "x"], "sets @ngram but --draft x"),
        (["--method", "ar", "--draft-length", "3"], "takes no drafts"),
        (["--method", "ar", "--max-draft-length", "3"], "bound --draft-length auto or heuristic"),
        (["--draft-length", "heuristic", "--min-draft-length", "0"], "--min-draft-length must be >= 1"),
        (["--draft", "WIDE"], "vocabulary"),
        (["--draft", "MISSING"], "no such model folder"),
        (["--prompt-override", ""], "empty"),
        (["--samples", "0"], "--samples"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(folders, capsys, extra, message):
    prompt = "x"
    if extra[0] == "--prompt-override":
        prompt, extra = extra[1], []
    extra = [str(folders / "wide") if e == "WIDE" else str(folders / "no" / "such") if e == "MISSING" else e for e in extra]
    args = ["generate", prompt, "--target", str(folders / "target"), "--draft", str(folders / "draft"), *extra]
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_greedy_decodes_at_temperature_0_as_argmax_sampling_does(folders, capsys):
    common = ["generate", "def f(x):", "--max-new-tokens", "8", "--target", str(folders / "target"),
              "--draft", str(folders / "draft")]
    assert main([*common, "--method", "greedy"]) == 0  # temperature 0 without being told
    greedy = capsys.readouterr().out
    assert main([*common, "--method", "ar", "--temperature", "0"]) == 0
    ar = capsys.readouterr().out
    assert greedy.rpartition("\n\n-- ")[0] == ar.rpartition("\n\n-- ")[0]
    assert main([*common, "--method", "greedy", "--temperature", "1"]) == 2  # sampled drafts: refused
    assert "greedy decodes at temperature 0" in capsys.readouterr().err


def test_stop_strings_and_a_tokenizer_folder_of_its_own(folders, tmp_path, capsys):
    common = ["generate", "def f(x):", "--max-new-tokens", "40", "--draft", str(folders / "draft")]
    assert main([*common, "--target", str(folders / "target"), "--stop", "e"]) == 0
    generated = capsys.readouterr().out.rpartition("\n\n-- ")[0][len("def f(x):"):]
    assert "e" not in generated[:-1]  # decoding stops at the token that completes the stop string
    # a target folder without a tokenizer takes one from --tokenizer (as train-pair writes them apart)
    char_tokenizer().save_pretrained(tmp_path / "tokenizer")
    assert main([*common, "--target", str(folders / "draft"), "--tokenizer", str(tmp_path / "tokenizer")]) == 0
    assert capsys.readouterr().out.startswith("def f(x):")


def test_samples_decode_as_one_batch_and_print_one_after_another(folders, capsys):
    common = ["generate", "def f(x):", "--max-new-tokens", "10", "--target", str(folders / "target"),
              "--draft", str(folders / "draft"), "--seed", "3"]
    assert main([*common, "--samples", "3", "--compare-ar"]) == 0
    out = capsys.readouterr().out
    texts = [part.partition("\n")[2].rstrip("\n") for part in out.rpartition("\n\n-- ")[0].split("# --- sample ")[1:]]
    footer = out.strip().splitlines()[-1]
    assert len(texts) == 3 and len(set(texts)) > 1 and " tokens in 3 samples |" in footer and "speedup" in footer
    assert main([*common, "--samples", "1"]) == 0  # one sample streams, as without the option
    assert "# --- sample" not in capsys.readouterr().out


def test_help_never_promises_hub_ids(capsys):
    assert main(["generate", "--help"]) == 0
    assert "hub" not in capsys.readouterr().out
