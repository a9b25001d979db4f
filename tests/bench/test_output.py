"""The command line that reproduces a benchmark run, from its settings."""

from __future__ import annotations

import shlex

from draftverify.bench.decode import DecodeSettings
from draftverify.bench.output import command_line
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
