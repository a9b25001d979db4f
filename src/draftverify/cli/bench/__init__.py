"""`draftverify bench NAME`: benchmarks that print JSON and a table.

Each benchmark is a module ``draftverify.bench.<module>`` with a frozen settings dataclass and
``run(settings, progress) -> int``; its command (options, help, defaults) is the module of the same
name here, whose options are the settings' fields by name (``_command.settings_of``). Add yours to
``app``."""

from __future__ import annotations

import typer

from .._command import Command
from . import decode, model_cost, ot, panel_mm, spectr_gbv, speed, verify_speed

__all__ = ["app"]

app = typer.Typer(help="Run a benchmark (prints JSON and a table).", no_args_is_help=False)
app.command("verify", cls=Command)(verify_speed.verify)
app.command("speed", cls=Command)(speed.speed)
app.command("decode", cls=Command)(decode.decode)
app.command("ot", cls=Command)(ot.ot)
app.command("model-cost", cls=Command)(model_cost.model_cost)
app.command("panel-mm", cls=Command)(panel_mm.panel_mm)
app.command("spectr-gbv", cls=Command)(spectr_gbv.spectr_gbv)
