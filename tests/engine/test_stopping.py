"""engine/stopping: EOS, stop strings and the length limit cut the committed tokens where transformers does."""

from __future__ import annotations

import pytest

from draftverify.engine.stopping import Stopper


class Letters:
    """Token i decodes to the i-th lowercase letter."""

    def decode(self, ids):
        return "".join(chr(ord("a") + i) for i in ids)


def test_length_limit_keeps_the_room_left():
    stopper = Stopper(max_new_tokens=5)
    assert stopper.cut([1, 2], [3, 4]) == ([3, 4], None)
    assert stopper.cut([1, 2], [3, 4, 5]) == ([3, 4, 5], "length")
    assert stopper.cut([1, 2], [3, 4, 5, 6, 7]) == ([3, 4, 5], "length")


def test_eos_is_kept_and_ends_the_row():
    stopper = Stopper(max_new_tokens=10, eos_token_id=0)
    assert stopper.cut([5], [3, 0, 4]) == ([3, 0], "eos")
    assert stopper.cut([5], [0]) == ([0], "eos")
    assert Stopper(max_new_tokens=2, eos_token_id=0).cut([], [3, 0, 4]) == ([3, 0], "eos")  # EOS at the limit: eos


def test_stop_string_keeps_the_token_that_completes_it_even_across_steps():
    stopper = Stopper(max_new_tokens=20, stop=("cd",), tokenizer=Letters())
    assert stopper.cut([0, 1], [2, 3, 4]) == ([2, 3], "stop")  # "ab" + "cde": "cd" completes at d
    assert stopper.cut([0, 2], [3, 4]) == ([3], "stop")  # "ac" + "d...": completed by the first new token
    assert stopper.cut([0], [1, 4]) == ([1, 4], None)
    assert Stopper(max_new_tokens=20, eos_token_id=4, stop=("bc",), tokenizer=Letters()).cut([0], [1, 2, 4]) == ([1, 2], "stop")


def test_stop_strings_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        Stopper(max_new_tokens=4, stop=("x",))
