"""The SPRINTER audit's teacher-forced distributions are valid float64 rows for the theory
functions (regression: the embedded target's float32 rows, upcast after the softmax, summed to
1 + 2e-6 at V = 8192 and `sprinter report` stopped on the float64 tolerance)."""

from __future__ import annotations

from draftverify.approx.audit import teacher_forced
from draftverify.models.pair import load_pair
from draftverify.probs import check_distributions

PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\ndef mean(values):\n'


def test_teacher_forced_rows_of_the_embedded_target_pass_the_float64_checks():
    pair = load_pair("tiny")
    tokens = pair.tokenizer.encode(PROMPT)
    probs, _, _ = teacher_forced(pair.target, tokens, len(tokens) - 1, None,
                               dict(temperature=1.0, top_k=None, top_p=None))
    assert probs.dtype.is_floating_point and probs.dtype.itemsize == 8
    check_distributions(probs, "target_probs")
