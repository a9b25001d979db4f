"""The training corpus: the Python standard library sources of the running interpreter.

Every machine that runs draftverify has this corpus, so the embedded pair can be retrained
anywhere (`draftverify train-pair`). Files are taken in sorted relative-path order; test
directories, ``site-packages`` and ``idlelib``'s test folder are excluded. The held-out split is by
file, decided by a hash of the relative path, so it does not depend on which other files exist.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# any path component in this set removes the file from the corpus
_EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__"})


@dataclass(frozen=True)
class CorpusSplit:
    """Relative paths (sorted) of the training and held-out files under ``root``."""

    root: Path
    train: tuple[str, ...]
    heldout: tuple[str, ...]

    def read(self, names: tuple[str, ...]) -> list[str]:
        """File contents in the given order (undecodable bytes replaced, so every file counts)."""
        return [(self.root / name).read_text(encoding="utf-8", errors="replace") for name in names]


def stdlib_root() -> Path:
    """The directory holding the running interpreter's pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path | None = None) -> list[str]:
    """Sorted relative paths of the ``*.py`` files under ``root`` (default: the stdlib)."""
    root = stdlib_root() if root is None else Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus root {root} is not a directory")
    names = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if _EXCLUDED_DIRS.isdisjoint(relative.parts[:-1]) and not relative.name.startswith("test_"):
            names.append(relative.as_posix())
    return sorted(names)


def is_heldout(name: str, heldout_percent: float) -> bool:
    """Whether file ``name`` belongs to the held-out split (stable hash of the relative path)."""
    bucket = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % 10_000
    return bucket < heldout_percent * 100


def split_corpus(root: Path | None = None, heldout_percent: float = 5.0,
                 max_files: int | None = None) -> CorpusSplit:
    """Split the corpus by file: about ``heldout_percent`` % of files are held out.

    ``max_files`` keeps only the first files in sorted order (for smoke runs)."""
    if not 0.0 < heldout_percent < 100.0:
        raise ValueError(f"heldout_percent must be in (0, 100), got {heldout_percent}")
    if max_files is not None and max_files < 2:
        raise ValueError(f"max_files must be >= 2 (one train, one held-out file), got {max_files}")
    root = stdlib_root() if root is None else Path(root)
    names = corpus_files(root)[:max_files]
    heldout = tuple(n for n in names if is_heldout(n, heldout_percent))
    train = tuple(n for n in names if not is_heldout(n, heldout_percent))
    if not heldout or not train:  # a tiny slice may hash entirely to one side: move the last file
        heldout, train = (names[-1],), tuple(names[:-1])
    return CorpusSplit(root=root, train=train, heldout=heldout)
