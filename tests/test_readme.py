"""The README runs as written: every ```python block as pasted into a fresh interpreter, every
command of its quick start (``make`` targets exist; ``draftverify`` lines run and exit 0)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import draftverify
from draftverify.cli import main
from tests.factories import FRESH_ENV

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)

PYTHON_BLOCKS = [m["body"] for m in FENCE.finditer(README) if m["lang"] == "python"]


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(?P<body>.*?)(?=^## |\Z)", README, re.MULTILINE | re.DOTALL)
    assert match is not None, f"README has no section {title!r}"
    return match["body"]


def _quick_start_commands() -> list[list[str]]:
    """The shell lines of the quick start's fenced blocks, split as a shell would (comments dropped)."""
    blocks = [m["body"] for m in FENCE.finditer(_section("Quick start")) if m["lang"] == ""]
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.strip()]


QUICK_START = _quick_start_commands()


def test_readme_has_the_blocks_this_test_runs():
    assert len(PYTHON_BLOCKS) >= 4
    assert {argv[0] for argv in QUICK_START} == {"make", "draftverify"}


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))])
def test_python_block_runs_as_pasted(code: str, tmp_path: Path):
    # a fresh interpreter per block, outside the repository: no state or files leak between blocks
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=FRESH_ENV)
    assert done.returncode == 0, f"README block failed:\n{code}\n--- stderr ---\n{done.stderr}"


def test_subpackages_are_attributes_imported_on_first_use():
    # the README's Layout claim, in a fresh interpreter: `import draftverify` loads neither
    # transformers nor scipy, and every subpackage is then reachable as an attribute
    code = (
        "import sys, draftverify\n"
        "assert 'transformers' not in sys.modules and 'scipy' not in sys.modules\n"
        "names = ['approx', 'bench', 'cli', 'engine', 'models', 'ot', 'testing', 'theory', 'train', 'probs', 'rng', 'verify']\n"
        "assert all(getattr(draftverify, n).__name__ == 'draftverify.' + n for n in names)\n"
        "assert set(names) <= set(dir(draftverify))\n"
        "assert draftverify.load_pair is draftverify.models.load_pair\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=FRESH_ENV)
    assert done.returncode == 0, done.stderr
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        draftverify.nope  # noqa: B018


def test_quick_start_make_targets_exist():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    wanted = [argv[1] for argv in QUICK_START if argv[0] == "make"]
    assert wanted == ["demo", "test"]
    assert set(wanted) <= targets


@pytest.mark.parametrize(
    "argv", [argv for argv in QUICK_START if argv[0] == "draftverify"], ids=lambda argv: argv[1]
)
def test_quick_start_command_runs_from_any_folder(argv: list[str], tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv[1:]) == 0, capsys.readouterr().err
    if "--plot" in argv:
        assert (tmp_path / argv[argv.index("--plot") + 1]).stat().st_size > 0
