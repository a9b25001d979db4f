"""The command line that reproduces a benchmark run, from its settings; the machine a report names."""

from __future__ import annotations

import json
import shlex

import torch

from draftverify.bench.decode import DecodeSettings
from draftverify.bench.output import command_line, emit_json
from draftverify.bench.speed import SpeedSettings


def test_every_field_is_its_flag_a_tuple_its_values_a_true_flag_alone():
    settings = DecodeSettings(methods=("ar", "ot(solver=gr,tol=1e-4)"), seeds=(3,), title="two words", tiny=True,
                              no_resume=True)
    words = shlex.split(command_line("decode", settings, leave_out=("no_resume",)))
    assert words[:3] == ["draftverify", "bench", "decode"]
    assert words[words.index("--methods") + 1: words.index("--methods") + 3] == ["ar", "ot(solver=gr,tol=1e-4)"]
    assert words[words.index("--title") + 1] == "two words" and words[words.index("--seeds") + 1] == "3"
    tiny = words.index("--tiny")
    assert tiny == len(words) - 1 or words[tiny + 1].startswith("--")  # a flag without a value
    assert "--no-resume" not in words  # left out
    assert "--stop-at-eos" not in words and "--top-k" not in words  # False and None are left out


def test_speed_reproduces_its_settings():
    line = command_line("speed", SpeedSettings(num_prompts=2, multi=0, json="out.json"), leave_out=("json",))
    assert line == ("draftverify bench speed --num-prompts 2 --max-new-tokens 128 --temperature 1.0 --draft-length 4 "
                    "--seed 0 --multi 0 --threads 1 --batch 8")


def test_a_written_report_names_the_machine_it_ran_on(tmp_path, capsys):
    emit_json({"goals": {"r_5": 1.2}}, tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["goals"] == {"r_5": 1.2} and json.loads(capsys.readouterr().out) == written
    machine = written["machine"]
    assert isinstance(machine["cpu"], str) and machine["cpu"] and machine["logical_cpus"] >= 1
    assert machine["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["utc"].endswith("+00:00")
