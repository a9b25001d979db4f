"""The command line as a whole: --version, python -m draftverify, help on every option with its
default, the top-level help, `list`, progress bars and --quiet, a closed pipe."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
import typer

from draftverify.cli import app, main
from draftverify.cli._command import PIPE_CLOSED, spread
from tests.factories import FRESH_ENV

SLOW_START = 900  # seconds: a fresh interpreter imports torch (minutes on a loaded 2-core machine)


def _commands(command, path=("draftverify",)):
    """Every command of the tree under ``command``, with its path."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, path + (name,))


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"draftverify {version('draftverify')}\n"


def test_python_dash_m_runs_the_command_line():
    done = subprocess.run([sys.executable, "-m", "draftverify", "--version"], capture_output=True, text=True,
                          timeout=SLOW_START)
    assert done.returncode == 0 and done.stdout == f"draftverify {version('draftverify')}\n" and done.stderr == ""


def test_every_command_and_option_has_help_and_every_default_is_shown():
    for path, command in _commands(typer.main.get_command(app)):
        assert command.help, f"{' '.join(path)} has no help"
        for param in command.params:
            where = f"{' '.join(path)} {param.opts[0]}"
            assert param.help and param.help.strip(), f"{where} has no help"
            if param.param_type_name != "option" or param.is_flag or param.name == "help":
                continue
            empty = param.default is None or param.default == []
            assert param.show_default is not False or (param.multiple and empty), f"{where} hides its default"
            assert not empty or isinstance(param.show_default, str) or param.multiple, \
                f"{where}: a default of None needs show_default saying what it means"


def test_top_level_help_lists_every_command_with_its_whole_summary(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "Draft-then-verify (speculative) decoding: exact and approximate verifiers, optimal transport, " \
           "the closed forms of the seed papers, benchmarks and an exactness checker." in text
    for name, command in typer.main.get_command(app).commands.items():
        summary = " ".join(command.help.split("\n\n")[0].split())
        assert f"{name} {summary}" in text


def test_list_shows_options_with_defaults_and_validate_once(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[2:] if line.strip() and not line.startswith(("Every", "*"))}
    assert "solver=gr, tol=0.0001" in rows["ot"] and "fraction=0.5" in rows["submaximal"]
    assert "E[tau]" in rows["gbv"]  # not eaten as markup
    assert rows["gbv"].split()[1] == "yes*" and rows["bv"].split()[1] == "yes"  # gbv: a prefix-only draft
    assert sum(line.startswith("* exact only with a draft whose law depends on the prefix alone") for line in lines) == 1
    assert not any("validate" in row for row in rows.values())
    assert sum("validate=true|false (default true)" in line for line in lines) == 1


def test_options_of_several_values_take_them_after_one_flag():
    many = {"--vocab", "--tau"}
    assert spread(["--vocab", "5", "6", "--repeats", "3"], many) == ["--vocab", "5", "--vocab", "6", "--repeats", "3"]
    assert spread(["--vocab=5", "6"], many) == ["--vocab=5", "--vocab", "6"]
    assert spread(["--tau", "-0.5", "1e-3", "-q"], many) == ["--tau", "-0.5", "--tau", "1e-3", "-q"]
    assert spread(["--vocab", "5", "--", "6"], many) == ["--vocab", "5", "--", "6"]


def test_progress_is_drawn_on_a_terminal_and_never_under_quiet(capsys, monkeypatch):
    argv = ["check", "sd", "--samples", "20"]
    inconclusive = 3  # 20 samples cannot judge the law of 4 tokens
    assert main(argv) == inconclusive  # stderr is not a terminal here: no bar
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat stderr as an interactive terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    assert main(argv) == inconclusive
    out, err = capsys.readouterr()
    assert "sequences through sd" in err and "20/20" in err and "p-value" in out  # a count, not a pulse
    assert main(["--quiet", *argv]) == inconclusive
    out, err = capsys.readouterr()
    assert err == "" and "p-value" in out


def test_the_command_line_and_the_engine_start_without_scipy():
    """scipy (about a second to import here) loads where a command uses it: the checker's chi-square,
    the optimal transport of tune and bench, the theory's root finders; generate needs none of them."""
    code = "import sys, draftverify.cli, draftverify.engine; print(sorted(m for m in sys.modules if m.startswith('scipy')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SLOW_START, env=FRESH_ENV)
    assert done.returncode == 0 and done.stdout == "[]\n", done.stdout + done.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    lengths = [str(length) for length in range(3000)]  # about 150 kB: more than a pipe holds
    child = subprocess.Popen([sys.executable, "-m", "draftverify", "theory", "speedup", "--draft-length", *lengths],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout.readline().startswith(b"S = k / (1 + L rho)")
    child.stdout.close()  # as `| head -1` does
    err = child.stderr.read().decode()
    assert child.wait(timeout=SLOW_START) == PIPE_CLOSED and err == ""


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["theory", "speedup", "--help"]])
def test_help_exits_zero(argv, capsys):
    assert main(argv) == 0 and "Usage: draftverify" in capsys.readouterr().out


def test_no_command_prints_the_help(capsys):
    assert main([]) == 2  # a usage error, but one that shows what there is to run
    out, err = capsys.readouterr()
    assert "Usage: draftverify" in out and "generate" in out and "bench" in out
    assert err == ""  # no empty "error: " line under the help
