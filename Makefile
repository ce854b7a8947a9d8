# One way to run things. `make demo` and `make test` each create or refresh .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Quieter TensorFlow start-up; numerics unaffected.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv demo smoke test test-fast test-backends lint format bench clean-venv

venv: $(STAMP)

# Reinstalled whenever the pins change.
$(STAMP): setup.cfg pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python >= 3.11 needed, found " + sys.version' 
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,beam,lint]'
	$(PY) -m pip check
	touch $(STAMP)

# The main job: corpus -> vocabulary -> pretraining data (train + held-out) -> pretrain 4
# models x 3 seeds -> fine-tuning sweep over learning rates -> export -> report with the
# papers' claims checked (restartable; DEMO_ARGS e.g. "--models=bert,swishrnn --work_dir=x").
demo: $(STAMP)
	$(PY) -m recurrent_bert.demo $(DEMO_ARGS)

# Every preset (8 families x 4 sizes) built and run forward once.
smoke: $(STAMP)
	$(PY) -m recurrent_bert.smoke

# The test suite: tiny configs, no network; the 25 slowest tests are listed at the end.
# Each file runs on one worker; the slowest files start first (their pytest.mark.slow).
# Then tests/backends/ once per other Keras backend, each in a session of its own (Keras
# picks its backend once per process).
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q --durations=25 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-backends

# Everyday work: the suite without the files marked slow (whole commands, training runs,
# multi-process strategies, the walkthrough, the wheel) and without the other backends.
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q -m "not slow" --durations=10 $(PYTEST_ARGS)

test-backends: $(STAMP)
	KERAS_BACKEND=jax $(PY) -m pytest -n 2 --dist loadfile -q --durations=10 tests/backends $(PYTEST_ARGS)
	KERAS_BACKEND=torch $(PY) -m pytest -n 2 --dist loadfile -q --durations=10 tests/backends $(PYTEST_ARGS)

# House style, checked (CI runs it): pyink formats, ruff lints (pyproject.toml).
LINTED := recurrent_bert tools tests benchmarks
lint: $(STAMP)
	$(VENV)/bin/pyink --check --quiet $(LINTED)
	$(VENV)/bin/ruff check --quiet $(LINTED)

format: $(STAMP)
	$(VENV)/bin/ruff check --quiet --fix --select I $(LINTED)
	$(VENV)/bin/pyink --quiet $(LINTED)

bench: $(STAMP)
	$(PY) benchmarks/step_time.py --quick

clean-venv:
	rm -rf $(VENV)
