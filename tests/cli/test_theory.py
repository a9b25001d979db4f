"""`draftverify theory ...`: tables carry the library's numbers, bad input exits with code 2."""

import pytest

from draftverify.cli import main


def run(capsys, *argv):
    code = main(["theory", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_speedup_table_and_plot(capsys, tmp_path):
    plot = tmp_path / "speedup.png"
    argv = ["speedup", "--acceptance", "0.8", "--rho", "0.05", "--draft-length", "5", "8", "--plot", str(plot)]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "3.6893" in out and "2.9514" in out  # k and S at L = 5
    assert out.splitlines()[-2].rstrip().endswith("*")  # L = 8 is the optimum
    assert plot.stat().st_size > 1000


def test_other_topics_print_their_numbers(capsys, tmp_path):
    assert "4.6856" in run(capsys, "tokens-per-step")[1]
    assert "7.8567" in run(capsys, "optimal-length", "--acceptance", "0.8")[1]
    code, out, _ = run(capsys, "temperature", "--tau", "0.8", "--plot", str(tmp_path / "t.png"))
    assert code == 0 and "0.8000" in out
    assert "0.7800,0.2200" in run(capsys, "sprinter", "--target", "0.9,0.1", "--draft", "0.5,0.5")[1]
    assert "0.0600" in run(capsys, "global-resolution", "--draft-length", "4")[1]


def test_kseq_topic(capsys):
    out = run(capsys, "kseq", "--num-drafts", "2")[1]
    assert "0.8150" in out and "0.8500" in out and "0.8222" in out  # K-SEQ, alpha*, seed 004's claim


@pytest.mark.parametrize(
    "argv",
    [
        ["speedup", "--acceptance", "1.3"],
        ["optimal-length", "--rho", "0"],
        ["temperature", "--target", "0.5,0.6"],
        ["kseq", "--target", "0.5,0.5", "--draft", "0.2,0.3,0.5"],
        ["sprinter", "--target", "0.5,0.5"],
    ],
)
def test_bad_input_exits_with_code_2(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith(f"draftverify theory {argv[0]}: error:") and "--" in err
