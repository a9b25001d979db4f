"""Bad input on the command line: one line on stderr, `draftverify <command>: error: ...`, naming
the flag (never a library argument such as num_tokens or an array repr), and exit code 2."""

from __future__ import annotations

import re

import pytest

from draftverify.cli import main
from draftverify.models.panel_mm import kernel

CODE_NAME = re.compile(r"\b[a-z]+_[a-z_]+\b|array\(")  # num_tokens, target_probs, array([-1])


@pytest.mark.parametrize(
    "argv,command,flags",
    [
        (["bench", "verify", "--vocab", "0"], "bench verify", ["--vocab"]),
        (["bench", "verify", "--vocab", "1000", "1"], "bench verify", ["--vocab"]),
        (["bench", "verify", "--threads", "0"], "bench verify", ["--threads"]),
        (["bench", "verify", "--repeats", "0"], "bench verify", ["--repeats"]),
        (["bench", "verify", "--vocab", "x"], "bench verify", ["--vocab"]),
        (["bench", "decode", "--methods"], "bench decode", ["--methods"]),
        (["bench", "decode", "--out", "/dev/null"], "bench decode", ["--out", "is a file"]),
        (["bench", "model-cost", "--accepted", "5"], "bench model-cost", ["--accepted", "--draft-length"]),
        (["bench", "panel-mm", "--shape", "576"], "bench panel-mm", ["--shape"]),
        (["bench", "panel-mm", "--shape", "48x16"], "bench panel-mm", ["--shape", "multiple of 32"]),
        (["bench", "panel-mm", "--statistic", "mean"], "bench panel-mm", ["--statistic"]),
        (["bench", "model-cost", "--statistic", "mean"], "bench model-cost", ["--statistic"]),
        (["bench", "panel-mm", "--clock", "cpu", "--threads", "2"], "bench panel-mm", ["--clock", "--threads"]),
        (["bench", "model-cost", "--clock", "gpu"], "bench model-cost", ["--clock"]),
        (["check", "sd", "--tokens", "0"], "check", ["--tokens"]),
        (["check", "sd", "--vocab", "10", "--tokens", "6"], "check", ["--tokens"]),
        (["check", "greedy"], "check", ["greedy", "temperature"]),
        (["theory", "speedup", "--draft-length", "-1"], "theory speedup", ["--draft-length"]),
        (["theory", "optimal-length", "--rho", "0"], "theory optimal-length", ["--rho"]),
        (["theory", "temperature", "--target", "0.5,0.6"], "theory temperature", ["--target"]),
        (["theory", "temperature", "--tau", "0.8", "--rho", "0.1"], "theory temperature", ["--rho", "--tau"]),
        (["theory", "kseq", "--target", "0.5,x"], "theory kseq", ["--target"]),
        (["theory", "sprinter", "--true-positive", "1"], "theory sprinter", ["--true-positive"]),
        (["generate", "x", "--method", "greedy", "--temperature", "1"], "generate", ["greedy", "temperature 1"]),
        (["check", "sd", "--seed", "100000000000000000000000"], "check", ["--seed", "18446744073709551615"]),
        (["check", "sd", "--seed", "1e23"], "check", ["--seed", "integer"]),
        (["generate", "x", "--top-p", "0"], "generate", ["--top-p"]),
        (["train-pair", "--minutes", "5", "--steps", "3"], "train-pair", ["--minutes", "--steps"]),
        (["tune", "--prompts", "/nonexistent/prompts.jsonl"], "tune", ["/nonexistent/prompts.jsonl"]),
        (["tune", "--prompts", "EMPTY_FILE"], "tune", ["no prompts"]),
        (["tune", "--prompts", "BINARY_FILE"], "tune", ["cannot read"]),
        (["tune", "--num-drafts", "1"], "tune", ["--num-drafts"]),
        (["tune", "--methods", "ot"], "tune", ["ot", "not exact"]),
        (["tune", "--temperature", "0"], "tune", ["--temperature"]),
        (["generate", "x", "--draft-length", "sometimes"], "generate", ["--draft-length", "sometimes"]),
        (["generate", "x", "--draft-length", "3", "--min-draft-length", "2"], "generate",
         ["--min-draft-length", "--draft-length 3"]),
        (["generate", "x", "--draft-length", "auto", "--min-draft-length", "5", "--max-draft-length", "3"], "generate",
         ["exclude every length"]),
        (["generate", "x", "--method", "sprinter", "--draft-length", "auto"], "generate", ["sprinter", "draft"]),
        (["check", "sd", "--draft-length", "heuristic", "--max-draft-length", "0"], "check", ["--max-draft-length"]),
        (["generate", "x", "--quantize", "int4"], "generate", ["--quantize", "int4"]),
        (["bench", "speed", "--quantize", "fp16"], "bench speed", ["--quantize", "fp16"]),
        (["tune", "--quantize", "int4"], "tune", ["--quantize", "int4"]),
        pytest.param(["generate", "x", "--target", "tiny", "--quantize", "gguf"], "generate", ["GGML", "gguf"],
                     marks=pytest.mark.skipif("avx512" not in kernel().isas, reason="without AVX-512 gguf runs float32")),
        (["generate", "x", "--target", "tiny", "--quantize", "gguf-q8"], "generate", ["GGML", "gguf-q8"]),
    ],
)
def test_bad_input_is_one_line_naming_the_flag_and_exit_code_2(capsys, tmp_path, argv, command, flags):
    files = {"EMPTY_FILE": tmp_path / "empty.jsonl", "BINARY_FILE": tmp_path / "binary.jsonl"}
    files["EMPTY_FILE"].write_text("\n")
    files["BINARY_FILE"].write_bytes(b"\xff\xfe\x00")
    code = main([str(files.get(a, a)) for a in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"draftverify {command}: error: ")
    assert all(flag in lines[0] for flag in flags), lines[0]
    assert not CODE_NAME.search(lines[0].split(": error: ")[1]), lines[0]
