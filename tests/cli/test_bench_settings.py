"""Each `draftverify bench` command hands its benchmark a frozen settings dataclass: every option
is a field of the same name with the same default, and `settings_of` refuses an option that no
field takes (the hand-built namespaces it replaces let a missing attribute crash after the models
had loaded)."""

from __future__ import annotations

import dataclasses

import pytest
import typer

from draftverify.bench import decode, model_cost, ot, panel_mm, speed, spectr_gbv, verify_speed
from draftverify.cli import app
from draftverify.cli._command import settings_of

SETTINGS = {
    "decode": decode.DecodeSettings, "speed": speed.SpeedSettings, "ot": ot.OtSettings,
    "verify": verify_speed.VerifySpeedSettings, "spectr-gbv": spectr_gbv.SpectrGbvSettings,
    "model-cost": model_cost.ModelCostSettings, "panel-mm": panel_mm.PanelMmSettings,
}


def _bench(name: str):
    return typer.main.get_command(app).commands["bench"].commands[name]


def test_every_bench_command_has_settings():
    assert sorted(typer.main.get_command(app).commands["bench"].commands) == sorted(SETTINGS)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_options_are_the_fields_with_the_same_defaults(name):
    fields = {field.name: field.default for field in dataclasses.fields(SETTINGS[name])}
    options = {param.name: param.default for param in _bench(name).params}
    assert sorted(options) == sorted(fields)
    for option, default in options.items():
        if name == "panel-mm" and option == "shape":  # the command reads KxN text
            default = [tuple(int(n) for n in text.split("x")) for text in default]
        if name == "speed" and option == "draft_length":  # the command reads L or auto
            default = int(default)
        expected = tuple(default) if isinstance(default, list) else default
        assert fields[option] == expected, f"bench {name} --{option}: {default!r} on the command, {fields[option]!r} in the settings"


def test_settings_of_takes_lists_as_tuples_and_refuses_an_option_without_a_field():
    command = _bench("spectr-gbv")
    ctx = typer.Context(command)
    ctx.params = dict(quick=True, runs=2, num_tokens=9, seed=3, json=None)
    assert settings_of(ctx, spectr_gbv.SpectrGbvSettings) == spectr_gbv.SpectrGbvSettings(True, 2, 9, 3, None)
    ctx.params = dict(ctx.params, shape=["1x2"])
    with pytest.raises(TypeError, match="SpectrGbvSettings has no field for the options shape"):
        settings_of(ctx, spectr_gbv.SpectrGbvSettings)
    ctx = typer.Context(_bench("verify"))
    ctx.params = {field.name: field.default for field in dataclasses.fields(verify_speed.VerifySpeedSettings)}
    ctx.params["vocab"] = [7, 8]
    assert settings_of(ctx, verify_speed.VerifySpeedSettings).vocab == (7, 8)


def test_bad_draft_kinds_fail_when_the_settings_are_built():
    with pytest.raises(ValueError, match="drafts: expected kinds among draft, ngram"):
        decode.DecodeSettings(drafts=("lstm",))
    with pytest.raises(ValueError, match="no n-gram drafter"):
        decode.DecodeSettings(drafts=("draft", "ngram"), tiny=True)
    assert speed.SpeedSettings(target="tiny").models.drafts == ("draft", "assistant", "ngram")
    assert speed.SpeedSettings(target="tiny", no_ngram=True).models.drafts == ("draft", "assistant")
    assert speed.SpeedSettings(tiny=True, ngram="folder").models.drafts == ("draft",)
    for named in (None, "smollm2"):  # the default pair ships its own n-gram drafter
        assert speed.SpeedSettings(target=named).models.drafts == ("draft", "assistant", "ngram")
    assert speed.SpeedSettings(target="folder", draft="d").models.drafts == ("draft", "assistant")  # none of its own
