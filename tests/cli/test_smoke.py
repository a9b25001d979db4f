"""Every command and every flag once, on tiny settings, in process: the test that catches a
documented path that does not run (`generate --stop` without a tokenizer, `bench decode --drafts
ngram`).

The flags come from the commands themselves (typer's parameters, what ``--help`` prints), so a new
flag without a run here fails :func:`test_every_flag_of_every_command_has_a_run`; the commands the
README and docs/*.md show must name flags that exist and commands that have a run here. The runs on
the embedded pair's folders or that train are marked slow.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
import typer

from draftverify.cli import app, main
from draftverify.models.pair import ASSETS
from draftverify.models.toy import char_tokenizer
from tests.factories import save_pair, tiny_lms

ROOT = Path(__file__).resolve().parents[2]
INCONCLUSIVE = 3  # `check` on a handful of samples cannot judge (draftverify.cli.check.EXIT_CODES)
EMBEDDED = [f"--target={ASSETS / 'target'}", f"--draft={ASSETS / 'draft'}"]

# (argv, exit code); {tmp}: a scratch folder, {toy}: folders of a tiny random pair with a char tokenizer
FAST = [
    (["--version"], 0),
    (["--quiet", "list"], 0),
    (["demo", "--skip-models", "--samples", "3", "--draft-length", "1"], 0),
    (["check", "sd", "--num-drafts", "1", "--draft-length", "1", "--samples", "5", "--tokens", "1", "--vocab", "3",
      "--order", "1", "--seed", "1", "--detect-tv", "0.5", "--depth-dependent-draft", "--json", "{tmp}/check.json"], INCONCLUSIVE),
    (["check", "submaximal", "--fraction", "0.5", "--option", "validate=true", "--samples", "5", "--json", "-"],
     INCONCLUSIVE),
    (["generate", "def f(x):", "--method", "bv", "--num-drafts", "1", "--draft-length", "2", "--option",
      "validate=true", "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--max-new-tokens", "4",
      "--stop", "e", "--seed", "1", "--target", "{toy}/target", "--draft", "{toy}/draft", "--compare-ar"], 0),
    (["generate", "def f(x):", "--chat", "--target", "{toy}/target", "--draft", "{toy}/draft"], 2),  # no template
    (["generate", "def f(x):", "--samples", "2", "--max-new-tokens", "4", "--target", "{toy}/target", "--draft",
      "{toy}/draft"], 0),
    (["generate", "def f(x):", "--method", "sd", "--draft-length", "auto", "--min-draft-length", "1",
      "--max-draft-length", "3", "--max-new-tokens", "6", "--target", "{toy}/target", "--draft", "{toy}/draft",
      "--quantize", "int8"], 0),
    (["check", "sd", "--draft-length", "auto", "--min-draft-length", "1", "--max-draft-length", "2", "--samples", "5",
      "--tokens", "1", "--vocab", "3", "--order", "1"], INCONCLUSIVE),
    (["tune", "--target", "tiny", "--prompts", "humaneval", "--field", "text", "--num-prompts", "2", "--max-new-tokens",
      "4", "--temperature", "0.9", "--top-k", "20", "--top-p", "0.95", "--methods", "sd", "bv", "--num-drafts", "2",
      "--max-draft-length", "2", "--repeats", "1", "--verify", "--verify-top", "1", "--threads", "1", "--seed", "0",
      "--draft", str(ASSETS / "draft"), "--quantize", "int8", "--plot", "{tmp}/tune.png", "--json", "{tmp}/tune.json"], 0),
    (["conform", "draftverify", "--method", "sd", "--samples", "800", "--seed", "0", "--time-limit", "10",
      "--json"], 0),
    (["conform", "draftverify", "--layout", "flattened"], 2),  # a named adapter has its own layout
    (["generate", "def f(x):", "--method", "greedy", "--max-new-tokens", "3", "--target", "{toy}/draft",
      "--draft", "{toy}/draft", "--tokenizer", "{toy}/tokenizer"], 0),
    (["bench", "verify", "--vocab", "20", "--draft-length", "2", "--repeats", "1", "--batch-sizes", "1",
      "--batch-vocab", "20", "--batch-draft-length", "2", "--threads", "1", "--json", "{tmp}/verify.json"], 0),
    (["bench", "ot", "--top-k", "4", "--num-drafts", "2", "--methods", "lp", "ot(solver=gr,tol=0.001)", "--tokens", "1",
      "--cell-seconds", "5", "--repeats", "1", "--max-arcs", "10000", "10000", "10000", "--source", "synthetic",
      "--vocab", "30", "--noise", "0.5", "--seed", "0", "--json", "{tmp}/ot.json", "--markdown", "{tmp}/ot.md"], 0),
    (["bench", "spectr-gbv", "--quick", "--runs", "2", "--num-tokens", "3", "--seed", "0", "--json",
      "{tmp}/spectr.json"], 0),
    (["theory", "speedup", "--acceptance", "0.8", "--rho", "0.1", "--draft-length", "1", "2",
      "--plot", "{tmp}/speedup.png"], 0),
    (["theory", "tokens-per-step", "--acceptance", "0.8", "--draft-length", "3"], 0),
    (["theory", "optimal-length", "--acceptance", "0.8", "--rho", "0.1"], 0),
    (["theory", "temperature", "--target", "0.6,0.4", "--tau", "0.8", "--plot", "{tmp}/temperature.png"], 0),
    (["theory", "temperature", "--target", "0.6,0.4", "--tau", "0.95", "--rho", "0.1"], 0),
    (["theory", "kseq", "--target", "0.9,0.1", "--draft", "0.5,0.5", "--num-drafts", "2"], 0),
    (["theory", "sprinter", "--true-positive", "0.9", "--false-positive", "0.2", "--run", "3", "--draft-time", "1",
      "--target", "0.6,0.4", "--draft", "0.5,0.5"], 0),
    (["theory", "global-resolution", "--tau", "0.01", "--draft-length", "2"], 0),
]

SLOW = [
    (["demo", "--max-new-tokens", "2", "--samples", "2"], 0),
    (["generate", "def add(a, b):", "--method", "kseq(K=2)", "--max-new-tokens", "3", *EMBEDDED[:1], "--draft",
      str(ASSETS / "ngram"), "--tokenizer", str(ASSETS / "tokenizer")], 0),  # a folder target names its n-gram
    (["bench", "speed", "--num-prompts", "1", "--max-new-tokens", "2", "--temperature", "1", "--draft-length", "2",
      "--seed", "0", "--target", "tiny", "--ngram", str(ASSETS / "ngram"), "--multi", "0", "--threads", "1", "--batch", "0",
      "--json", "{tmp}/speed.json"], 0),
    (["bench", "speed", "--tiny", "--no-ngram", "--num-prompts", "1", "--max-new-tokens", "2", "--multi", "0",
      "--batch", "1", "--quantize", "int8"], 0),
    (["bench", "speed", "--target", "{toy}/target", "--draft", "{toy}/draft", "--no-ngram", "--num-prompts", "1",
      "--max-new-tokens", "2", "--multi", "0", "--batch", "0"], 0),
    (["bench", "decode", "--tiny", "--prompts", "{tmp}/prompts.jsonl", "--field", "code", "--num-prompts", "1",
      "--methods", "ar", "sd", "--num-drafts", "1", "--draft-lengths", "2", "--temperatures", "1", "--drafts", "draft",
      "--seeds", "0", "--top-k", "20", "--max-new-tokens", "3", "--stop-at-eos", "--deviation-samples", "0",
      "--deviation-prompts", "1", "--out", "{tmp}/decode", "--plots-dir", "{tmp}/plots", "--cache", "{tmp}/cache",
      "--prefix", "smoke", "--title", "Smoke", "--no-resume", "--threads", "1"], 0),
    (["bench", "decode", "--target", "{toy}/target", "--draft", "{toy}/draft", "--num-prompts", "1", "--methods",
      "ar", "sd", "--num-drafts", "1", "--draft-lengths", "2", "--temperatures", "1", "--seeds", "0",
      "--max-new-tokens", "3", "--deviation-samples", "0", "--out", "{tmp}/decode-toy"], 0),
    (["bench", "decode", "--target", "tiny", "--num-prompts", "1", "--methods", "ar", "sd", "--num-drafts", "1",
      "--draft-lengths", "2", "--temperatures", "1", "--drafts", "draft", "ngram", "--seeds", "0",
      "--max-new-tokens", "3", "--deviation-samples", "0", "--out", "{tmp}/decode-ngram"], 0),
    (["bench", "ot", "--source", "pair", "--num-prompts", "1", "--tokens", "1", "--top-k", "4", "--num-drafts", "2",
      "--methods", "lp", "--repeats", "1"], 0),
    (["bench", "model-cost", "--repeats", "1", "--prompt-length", "8", "--draft-length", "2", "--accepted", "1",
      "--threads", "1", "--target", "{toy}/target", "--draft", "{toy}/draft", "--kv-cache", "static",
      "--statistic", "min", "--clock", "cpu", "--json", "{tmp}/model-cost.json"], 0),
    (["bench", "panel-mm", "--shape", "64x48", "--rows", "1", "2", "--megabytes", "1", "--repeats", "1",
      "--statistic", "min", "--clock", "cpu", "--threads", "1", "--json", "{tmp}/panel.json"], 0),
    (["train-draft", "--label-minutes", "0", "--train-minutes", "0", "--steps", "1", "--target", "smollm2", "--kind", "llama",
      "--output", "{tmp}/draft", "--workdir", "{tmp}/draft-work"], 2),  # no teacher shards yet: a clear error
    (["train-draft", "--kind", "eagle", "--label-minutes", "0"], 2),  # an unknown kind: a clear error
    (["train-draft", "--kind", "llama", "--extra-shards", "{tmp}", "--heldout", "{tmp}", "--label-minutes", "0"], 2),  # n-gram only
    (["train-draft", "--kind", "ngram", "--order", "5", "--label-minutes", "0"], 2),  # 49152^5 codes overflow int64
    (["train-draft", "--kind", "llama", "--from", "{tmp}", "--label-minutes", "0"], 2),  # a further stage: feature only
    (["train-draft", "--kind", "ngram", "--unroll", "2", "--label-minutes", "0"], 2),  # feature settings: feature only
    (["train-draft", "--kind", "llama", "--layers", "2", "--label-minutes", "0"], 2),  # a feature head's depth: feature only
    (["train-draft", "--kind", "llama", "--teacher-seed", "1", "--warmup", "5", "--seed", "2", "--label-minutes", "0"],
     2),  # --warmup and --seed are the feature draft's
    (["train-draft", "--kind", "feature", "--lr", "0", "--label-minutes", "0"], 2),  # a learning rate > 0
    (["train-draft", "--kind", "ngram", "--calibration", "2", "--label-minutes", "0"], 2),  # feature only
    (["train-draft", "--kind", "llama", "--source-minutes", "1", "--label-minutes", "0"], 2),  # feature only
    (["train-draft", "--kind", "feature", "--calibration", "33", "--label-minutes", "0"], 2),  # 32 calibration prompts
    (["train-draft", "--kind", "feature", "--fusion", "3,x", "--label-minutes", "0"], 2),  # layer counts
    (["train-draft", "--kind", "feature", "--fusion", "15,3", "--label-minutes", "0"], 2),  # increasing
    (["train-draft", "--kind", "ngram", "--fusion", "3", "--label-minutes", "0"], 2),  # feature only
    (["train-draft", "--kind", "feature", "--regression", "-1", "--label-minutes", "0"], 2),  # a weight >= 0
    (["train-draft", "--kind", "llama", "--regression", "0", "--label-minutes", "0"], 2),  # feature only
    (["train-draft", "--kind", "feature", "--bucket", "8192", "--label-minutes", "0"], 2),  # fewer than the subset's
    (["train-draft", "--kind", "feature", "--precision", "float16", "--label-minutes", "0"], 2),  # float32 or bfloat16
    (["train-draft", "--prompts", "site", "--label-minutes", "0"], 2),  # stdlib or packages
    (["evaluate-draft", "--chat", "1", "--humaneval", "1", "--tokens", "4", "--ahead", "2", "--draft-length", "2",
      "--context", "64", "--seed", "100", "--source", "1", "--target", "smollm2", "--threads", "1", "--engine",
      "--answers", "{tmp}/answers.json", "--json", "{tmp}/heldout.json"], 0),  # the default pair's draft, held out
    (["evaluate-draft", "--draft", "=folder"], 2),  # a draft without a name
    (["evaluate-draft", "--draft", "{tmp}/no-such-draft"], 2),
    (["evaluate-draft", "--chat", "0", "--humaneval", "0"], 2),  # no prompts
    (["train-pair", "--quick", "--workdir", "{tmp}/train", "--output", "{tmp}/pair", "--seed", "0", "--steps", "2",
      "--distill-steps", "1"], 0),
    (["train-pair", "--quick", "--workdir", "{tmp}/train-minutes", "--minutes", "0.01"], 0),
    # the tiny pair: a random toy pair's handful of positions can leave a lambda with one label class
    (["sprinter", "train", "--target", "tiny", "--draft", str(ASSETS / "draft"), "--output", "{tmp}/sprinter",
      "--sequences-per-kind", "2", "--prefix-length", "6", "--positions", "4", "--files", "2",
      "--default-lambda", "1.2", "--figure", "{tmp}/roc.png", "--data", "{tmp}/sprinter.npz", "--seed", "0"], 0),
    (["sprinter", "report", "--target", "tiny", "--draft", str(ASSETS / "draft"), "--classifier", "shipped",
      "--num-prompts", "1", "--max-new-tokens", "3", "--thresholds", "0.5", "--draft-length", "2",
      "--sprinter-cap", "2", "--results-dir", "{tmp}/results", "--img-dir", "{tmp}/img", "--seed", "0"], 0),
]


def _argv(run) -> list[str]:
    return (run.values[0] if hasattr(run, "values") else run)[0]


def _leaves(command, path=()):
    """(path, command) of every command that runs (not a group) under ``command``."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
    for name, sub in (subcommands or {}).items():
        yield from _leaves(sub, path + (name,))


ROOT_COMMAND = typer.main.get_command(app)
COMMANDS = dict(_leaves(ROOT_COMMAND))
TOP_LEVEL_FLAGS = {opt for p in ROOT_COMMAND.params for opt in p.opts if opt.startswith("--") and opt != "--help"}


def _split(argv: list[str]) -> tuple[tuple[str, ...], set[str]]:
    """(the command path of ``argv``, the long flags it uses); top-level flags count under ()."""
    path: tuple[str, ...] = ()
    flags = set()
    for arg in argv:
        if arg.startswith("--"):
            flags.add(arg.partition("=")[0])
        elif not flags - TOP_LEVEL_FLAGS and path + (arg,) in {p[: len(path) + 1] for p in COMMANDS}:
            path += (arg,)
    return path, flags


def _flags(command) -> set[str]:
    return {opt for p in command.params if p.param_type_name == "option" and p.name != "help"
            for opt in p.opts if opt.startswith("--")}


def test_every_flag_of_every_command_has_a_run():
    used: dict[tuple[str, ...], set[str]] = {}
    for run in FAST + SLOW:
        path, flags = _split(_argv(run))
        used.setdefault(path, set()).update(flags)
    missing = {" ".join(path): sorted(_flags(command) - used.get(path, set())) for path, command in COMMANDS.items()}
    assert not {k: v for k, v in missing.items() if v} and not set(COMMANDS) - set(used), missing
    assert TOP_LEVEL_FLAGS <= set().union(*used.values())


DOCUMENTED = re.compile(r"^\s*(?:\$ )?(draftverify [^\n`#|]+)|`(draftverify [^`]+)`", re.MULTILINE)


def _documented_commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of every `draftverify ...` line and inline command in the README and docs/*.md."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text().replace("\\\n", " ")
        for match in DOCUMENTED.finditer(text):
            line = (match[1] or match[2]).strip()
            try:
                argv = shlex.split(line, comments=True)[1:]
            except ValueError:
                continue
            argv = [a for a in argv if not a.startswith("$(")]
            found.append((doc.name, argv))
    return found


def test_every_documented_command_exists_with_its_flags():
    documented = _documented_commands()
    assert len(documented) > 10
    ran = {_split(_argv(run))[0] for run in FAST + SLOW}
    for name, argv in documented:
        path, flags = _split(argv)
        if path not in COMMANDS:  # a group named alone (`draftverify bench verify / speed / ...` in a table)
            assert any(p[: len(path)] == path for p in COMMANDS), f"{name}: draftverify {' '.join(argv)}"
            continue
        unknown = flags - _flags(COMMANDS[path]) - TOP_LEVEL_FLAGS - {"--help"}
        assert not unknown, f"{name}: `draftverify {' '.join(argv)}` uses flags that do not exist: {sorted(unknown)}"
        assert path in ran


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("smoke")
    toy = tmp / "toy"
    tokenizer = char_tokenizer()
    save_pair(toy, *tiny_lms(len(tokenizer), dtype=torch.float32), tokenizer)
    tokenizer.save_pretrained(toy / "tokenizer")
    (tmp / "prompts.jsonl").write_text(json.dumps({"code": "def f(x):"}) + "\n")
    return {"tmp": str(tmp), "toy": str(toy)}


def _run(run, places, capsys, monkeypatch):
    argv, code = run
    monkeypatch.chdir(places["tmp"])  # anything written by default lands in the scratch folder
    argv = [a.format(**places) for a in argv]
    assert main(argv) == code, f"draftverify {shlex.join(argv)}\n{capsys.readouterr().err}"


@pytest.mark.parametrize("run", FAST, ids=[" ".join(run[0][:2]) for run in FAST])
def test_runs(run, places, capsys, monkeypatch):
    _run(run, places, capsys, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("run", SLOW, ids=[" ".join(_argv(run)[:2]) for run in SLOW])
def test_slow_runs(run, places, capsys, monkeypatch):
    _run(run, places, capsys, monkeypatch)
