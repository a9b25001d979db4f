"""`draftverify sprinter train|report`: SPRINTER's classifier for a pair, and what it costs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from ._command import Command, quiet_transformers
from ._options import Seed
from ._progress import progress_bar

__all__ = ["app"]

_DOCS = Path("docs")

app = typer.Typer(help="SPRINTER (approximate, seed 003): train its classifier, report its cost.")

Target = Annotated[str | None, typer.Option(help="Target: 'tiny', 'smollm2' (the default pair, its feature draft), a .gguf file or a model folder.",
                                             show_default="tiny")]
Draft = Annotated[str | None, typer.Option(help="Draft model folder (a transformers model or a feature draft).",
                                           show_default="the tiny pair's draft")]
MaxNewTokens = Annotated[int, typer.Option(min=1, help="Tokens generated per prompt.")]


@app.command("train", cls=Command)
def train(
    ctx: typer.Context,
    target: Target = None,
    draft: Draft = None,
    output: Annotated[str, typer.Option(help="Folder the classifiers are written to (use it with --method sprinter "
                                        "--option classifier=DIR).")] = "sprinter-classifier",
    sequences_per_kind: Annotated[int, typer.Option(min=1, help="Sequences per prefix kind.")] = 48,
    prefix_length: Annotated[int, typer.Option(min=1, help="Tokens of each prefix.")] = 64,
    positions: Annotated[int, typer.Option(min=1, help="Drafted tokens recorded per sequence.")] = 32,
    files: Annotated[int, typer.Option(min=1, help="Corpus files to draw prefixes from.")] = 120,
    default_lambda: Annotated[float, typer.Option(help="The lambda of the shipped classifier.json.")] = 1.2,
    figure: Annotated[str | None, typer.Option(help="ROC figure (PNG).", show_default="OUTPUT/roc.png")] = None,
    data: Annotated[str | None, typer.Option(help="Cache of the collected data (.npz): loaded if it exists, "
                                             "else written.", show_default="no cache")] = None,
    seed: Seed = 0,
) -> int:
    """Collect data over the four prefix kinds, train the classifier per lambda."""
    import torch

    from ..approx.data import SprinterData, collect
    from ..approx.train import TrainSettings, corpus_documents, plot_roc, train_all
    from ..models.hidden import HiddenStateTap, draft_fingerprint

    settings = TrainSettings(sequences_per_kind=sequences_per_kind, prefix_length=prefix_length,
                             positions=positions, files=files, default_lambda=default_lambda, seed=seed)
    pair = _load(target, draft)
    folder = Path(output)
    figure = figure or str(folder / "roc.png")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    with progress_bar(ctx) as progress:
        task = progress.add_task("collecting drafted tokens", total=None)
        if data and Path(data).exists():
            collected = SprinterData.load(data)
            print(f"loaded {len(collected)} drafted tokens from {data}")
        else:
            documents = corpus_documents(pair.tokenizer, settings.files, settings.seed)
            collected = collect(pair.target, pair.draft, documents, sequences_per_kind=settings.sequences_per_kind,
                                prefix_length=settings.prefix_length, positions=settings.positions, seed=settings.seed)
            print(f"collected {len(collected)} drafted tokens from {len(documents)} files")
            if data:
                collected.save(data)
        progress.update(task, description="training the classifiers")
        summary = train_all(collected, HiddenStateTap(pair.draft).hidden_size, folder, settings,
                            draft_fingerprint(pair.draft))
    summary["command"] = _command(ctx)
    (folder / "roc.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot_roc(summary, Path(figure))
    print(f"classifiers and roc.json in {folder}; ROC figure {figure}")
    return 0


@app.command("report", cls=Command)
def report(
    ctx: typer.Context,
    target: Target = None,
    draft: Draft = None,
    classifier: Annotated[str | None, typer.Option(help="A saved classifier.", show_default="the shipped one")] = None,
    num_prompts: Annotated[int, typer.Option(min=1, help="The first N HumanEval prompts.")] = 20,
    max_new_tokens: MaxNewTokens = 48,
    thresholds: Annotated[list[float] | None, typer.Option(
        min=0.0, max=1.0, metavar="TAU...", help="Decision thresholds tau of the classifier.",
        show_default="0, 1 and those giving 90/70/50/30/10% yes on held-out tokens")] = None,
    draft_length: Annotated[int, typer.Option(min=1, help="sd's L.")] = 4,
    sprinter_cap: Annotated[int, typer.Option(min=1, help="The longest SPRINTER run.")] = 8,
    results_dir: Annotated[str, typer.Option(help="Folder of the Markdown report.")] = str(_DOCS / "results"),
    img_dir: Annotated[str, typer.Option(help="Folder of the figures.")] = str(_DOCS / "img"),
    seed: Seed = 0,
) -> int:
    """Speed, deviation and quality of sprinter against sd and ar (docs/results/sprinter.md)."""
    from ..approx.load import load_classifier
    from ..approx.render import write_report
    from ..approx.report import ReportSettings, run_report

    settings = ReportSettings(prompts=num_prompts, max_new_tokens=max_new_tokens,
                              thresholds=tuple(thresholds) if thresholds else None,
                              draft_length=draft_length, sprinter_cap=sprinter_cap, seed=seed)
    pair = _load(target, draft)
    with progress_bar(ctx) as progress:
        task = progress.add_task("sprinter, sd and ar on the prompts", total=num_prompts)

        def prompt_done(line: str) -> None:  # the bar counts prompts; without a bar the lines print
            progress.advance(task)
            if progress.disable:
                print(line)

        result = run_report(pair, settings, classifier=classifier, log=prompt_done)
    embedded = target is None and draft is None
    result["pair"] = "the tiny pair" if embedded else f"target {target or 'tiny'}, draft {draft or 'its own'}"
    result["classifier"] = classifier or "the one shipped for this pair's draft"
    roc_path = (Path(classifier) if classifier else load_classifier().path_for(pair.draft)).parent / "roc.json"
    roc = json.loads(roc_path.read_text()) if roc_path.exists() else None
    path = write_report(result, roc, _command(ctx), Path(results_dir), Path(img_dir))
    columns = ("method", "tokens_per_second", "speedup_vs_sd", "target_calls_per_token", "rouge_l_vs_sd", "audit_tv_draws")
    print(json.dumps([{k: r.get(k) for k in columns} for r in result["rows"]], indent=1))
    print(f"report: {path}")
    return 0


def _load(target: str | None, draft: str | None):
    quiet_transformers()
    from ..models.pair import load_pair

    pair = load_pair(target or "tiny", draft)  # the shipped classifier reads the tiny pair's draft
    if pair.draft_name == "ngram":
        raise ValueError("SPRINTER's classifier reads the draft's hidden state: use a transformers or feature draft")
    return pair


def _command(ctx: typer.Context) -> str:
    """The command line that reproduces this run (every option spelled out)."""
    words = ctx.command_path.split()
    for param in ctx.command.params:
        value = ctx.params[param.name]
        if value is None or (isinstance(value, (list, tuple)) and not value):  # unset, or no values given
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        words += [param.opts[0], *(shlex.quote(str(v)) for v in values)]
    return " ".join(words)
