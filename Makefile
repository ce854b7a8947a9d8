# One way to run things. `make demo` and `make test` each create or refresh .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Quieter TensorFlow start-up; numerics unaffected.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv demo test bench clean-venv

venv: $(STAMP)

# Reinstalled whenever the pins change.
$(STAMP): setup.cfg pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python >= 3.11 needed, found " + sys.version' 
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,beam]'
	$(PY) -m pip check
	touch $(STAMP)

# The main job (for now: build every preset and run a forward pass on each).
demo: $(STAMP)
	$(PY) -m recurrent_bert.smoke

# The test suite: tiny configs, no network.
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/step_time.py --quick

clean-venv:
	rm -rf $(VENV)
