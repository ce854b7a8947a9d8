"""recurrent_bert.tools.sweep (with sweep_grid and sweep_tables): the aggregation against hand
computations, one real tiny sweep, bad flags."""

import csv
import io
import json
import math
import os
import statistics
import sys

import numpy as np
import pytest

from recurrent_bert.tasks import sample_tasks as generated_tasks
from recurrent_bert.tools import sweep
from recurrent_bert.tools import sweep_grid
from recurrent_bert.tools import sweep_tables
from tests.support import forkserver

pytestmark = pytest.mark.slow(seconds=40)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_sweep(*flags, timeout=300):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return forkserver.run(
      [sys.executable, "-m", "recurrent_bert.tools.sweep", *flags], REPO, env, timeout=timeout
  )


def make_row(model, task, lr, seed, value, seconds=0.01, metric="accuracy"):
  return {
      "model": model,
      "task": task,
      "learning_rate": lr,
      "seed": seed,
      "main_metric": metric,
      "value": value,
      "metrics": {metric: value, "num_examples": 50},
      "eval_split": "dev",
      "seconds_per_train_step": seconds,
      "num_train_steps": 100,
      "run_dir": "",
  }


# Two models × two tasks × two learning rates × three seeds (one seed missing), values
# chosen so that the best of restarts and the best mean come from different lrs.
VALUES = {
    ("bert", "rte", 1e-4): [0.60, 0.70, 0.65],
    ("bert", "rte", 3e-4): [0.50, 0.80, 0.62],
    ("bert", "mrpc", 1e-4): [0.81, 0.83],
    ("bert", "mrpc", 3e-4): [0.79, 0.84, 0.80],
    ("swish", "rte", 1e-4): [0.55, 0.56, 0.57],
    ("swish", "rte", 3e-4): [0.66, 0.64, 0.66],  # a tie for the best at seeds 0 and 2
    ("swish", "mrpc", 1e-4): [0.70, 0.72, 0.71],
    ("swish", "mrpc", 3e-4): [0.75, 0.74, 0.73],
}
TIMES = {
    "bert": [0.010, 0.030, 0.020, 0.050, 0.040, 0.060, 0.070, 0.080, 0.090, 0.100, 0.110],
    "swish": [0.2] * 11 + [float("nan")],
}


def synthetic_rows():
  rows = []
  counters = {"bert": 0, "swish": 0}
  for (model, task, lr), values in VALUES.items():
    for seed, value in enumerate(values):
      seconds = TIMES[model][counters[model]]
      counters[model] += 1
      rows.append(make_row(model, task, lr, seed, value, seconds))
  return rows


def test_mean_std_per_learning_rate_matches_a_reference():
  by_lr = sweep_tables.summarize_by_learning_rate(synthetic_rows())
  assert len(by_lr) == len(VALUES)
  for entry in by_lr:
    values = VALUES[(entry["model"], entry["task"], entry["learning_rate"])]
    assert entry["n"] == len(values)
    assert entry["mean"] == pytest.approx(np.mean(values), abs=1e-12)
    assert entry["std"] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    assert entry["std"] == pytest.approx(statistics.stdev(values), abs=1e-12)
  # Order: models and tasks as first seen, learning rates ascending.
  assert [(e["model"], e["task"], e["learning_rate"]) for e in by_lr][:4] == [
      ("bert", "rte", 1e-4),
      ("bert", "rte", 3e-4),
      ("bert", "mrpc", 1e-4),
      ("bert", "mrpc", 3e-4),
  ]
  # One seed: the mean is that value, the sample std undefined.
  single = sweep_tables.summarize_by_learning_rate([make_row("m", "t", 1e-3, 7, 0.25)])
  assert single[0]["mean"] == 0.25 and math.isnan(single[0]["std"]) and single[0]["n"] == 1


def test_best_of_restarts_by_hand():
  best = {(b["model"], b["task"]): b for b in sweep_tables.best_of_restarts(synthetic_rows())}
  # Worked out from VALUES by hand.
  assert (
      best[("bert", "rte")]["best"],
      best[("bert", "rte")]["learning_rate"],
      best[("bert", "rte")]["seed"],
      best[("bert", "rte")]["n"],
  ) == (0.80, 3e-4, 1, 6)
  assert (
      best[("bert", "mrpc")]["best"],
      best[("bert", "mrpc")]["learning_rate"],
      best[("bert", "mrpc")]["seed"],
      best[("bert", "mrpc")]["n"],
  ) == (0.84, 3e-4, 1, 5)
  # The tie 0.66 (seeds 0 and 2) goes to the smaller seed.
  assert (
      best[("swish", "rte")]["best"],
      best[("swish", "rte")]["learning_rate"],
      best[("swish", "rte")]["seed"],
  ) == (0.66, 3e-4, 0)
  assert (best[("swish", "mrpc")]["best"], best[("swish", "mrpc")]["seed"]) == (0.75, 0)
  # Best of restarts (bert/rte: lr 3e-4) differs from the best mean (bert/rte: lr 1e-4).
  best_mean = sweep_tables.best_mean_learning_rate(
      sweep_tables.summarize_by_learning_rate(synthetic_rows())
  )
  assert best_mean[("bert", "rte")]["learning_rate"] == 1e-4
  assert best_mean[("bert", "mrpc")]["learning_rate"] == 1e-4  # 0.82 > 0.81
  # NaN never wins.
  rows = [make_row("m", "t", 1e-3, 0, float("nan")), make_row("m", "t", 1e-3, 1, 0.3)]
  assert sweep_tables.best_of_restarts(rows)[0]["best"] == 0.3


def test_step_time_is_the_median_over_the_models_runs():
  times = {t["model"]: t for t in sweep_tables.step_time_by_model(synthetic_rows())}
  assert times["bert"]["median_seconds_per_train_step"] == pytest.approx(0.06)  # 11 values
  assert times["bert"]["n"] == 11
  assert times["swish"]["median_seconds_per_train_step"] == pytest.approx(0.2)
  assert times["swish"]["n"] == 11  # the NaN is not counted


def test_tables_written_from_rows(tmp_path):
  rows = synthetic_rows()
  rows[0]["metrics"]["f1"] = 0.5  # a metric only one row has: an empty cell elsewhere
  results = list(csv.DictReader(io.StringIO(sweep_tables.results_csv(rows))))
  assert len(results) == len(rows)
  assert results[0]["f1"] == "0.5" and results[1]["f1"] == ""
  assert float(results[3]["learning_rate"]) == 3e-4 and results[3]["value"] == "0.5"
  summary = list(csv.DictReader(io.StringIO(sweep_tables.summary_csv(rows))))
  assert len(summary) == len(VALUES)
  first = summary[0]
  assert (first["model"], first["task"], float(first["learning_rate"]), first["n"]) == (
      "bert",
      "rte",
      1e-4,
      "3",
  )
  assert float(first["std"]) == pytest.approx(np.std([0.60, 0.70, 0.65], ddof=1))
  assert (
      first["is_best_mean_learning_rate"] == "1" and summary[1]["is_best_mean_learning_rate"] == "0"
  )
  assert float(first["best_of_restarts"]) == 0.8
  assert first["best_of_restarts_seed"] == "1"
  markdown = sweep_tables.summary_markdown(rows, failed=["x/y lr=1 seed=0: exit status 1"])
  assert "**0.6500 ± 0.0500 (n=3)**" in markdown
  assert "0.8200 ± 0.0141 (n=2)" in markdown  # bert/mrpc lr 1e-4, one seed missing
  assert "| bert | rte | accuracy | 0.8000 | 0.0003 | 1 | 6 |" in markdown
  assert "Failed or not run" in markdown and "exit status 1" in markdown
  paths = sweep_tables.write_outputs(rows, str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == [
      "lr_sweep.png",
      "results.csv",
      "summary.csv",
      "summary.md",
  ]
  with open(paths[-1], "rb") as f:
    assert f.read(8) == PNG_MAGIC


def test_main_split_and_unfinished_runs(tmp_path):
  mnli = {
      "main_metric": "accuracy",
      "main_metric_value": 0.7,
      "task": "mnli",
      "dev_matched": {"accuracy": 0.7},
      "dev_mismatched": {"accuracy": 0.6},
  }
  assert sweep_tables.main_eval_split(mnli) == "dev_matched"
  mnli["dev_mismatched"]["accuracy"] = 0.7
  assert sweep_tables.main_eval_split(mnli) == "dev_matched"
  # Recorded by finetuning: the first listed split, whatever the values.
  mnli["eval_splits"] = ["dev_mismatched", "dev_matched"]
  assert sweep_tables.main_eval_split(mnli) == "dev_mismatched"
  # An evaluation during training (no timing yet) is not a finished run.
  interim = {"main_metric": "accuracy", "main_metric_value": 0.7, "dev": {"accuracy": 0.7}}
  (tmp_path / "eval_results.json").write_text(json.dumps(interim))
  assert sweep_tables.read_eval_results(str(tmp_path)) is None
  final = dict(interim, seconds_per_train_step=0.1, num_train_steps=10)
  (tmp_path / "eval_results.json").write_text(json.dumps(final))
  assert sweep_tables.read_eval_results(str(tmp_path)) == final


def test_failed_runs_are_reported_and_the_sweep_goes_on(tmp_path, monkeypatch):
  monkeypatch.chdir(REPO)  # the runs are `python -m MODULE` from the working directory

  # Cheap stand-ins for entry points: a module that does not exist (exit 1), and the sweep
  # itself with a bad flag (exit 2 = bad input: the other runs of that pair are not run).
  def run(model, seed, module, args):
    return sweep_grid.Run(
        model, "t", 1e-3, seed, module, tuple(args), str(tmp_path / model / f"seed{seed}")
    )

  bad_input = [
      "--models=nonsense",
      "--tasks=t=/x",
      "--learning_rates=1",
      f"--output_dir={tmp_path}",
  ]
  runs = [
      run("a", 0, "tests.tools.no_such_module", []),
      run("b", 0, "recurrent_bert.tools.sweep", bad_input),
      run("b", 1, "recurrent_bert.tools.sweep", bad_input),
  ]
  # A finished run made with other flags is reported, not reused.
  reused = run("c", 0, "recurrent_bert.tools.sweep", ["--x=1"])
  os.makedirs(reused.run_dir)
  with open(os.path.join(reused.run_dir, "sweep_command.json"), "w") as f:
    json.dump({"args": ["recurrent_bert.tools.sweep", "--x=2"]}, f)
  with open(os.path.join(reused.run_dir, "eval_results.json"), "w") as f:
    json.dump(
        {
            "main_metric": "accuracy",
            "main_metric_value": 1.0,
            "dev": {"accuracy": 1.0},
            "seconds_per_train_step": 0.1,
            "num_train_steps": 1,
        },
        f,
    )
  out = io.StringIO()
  runner = sweep.Sweep([*runs, reused], parallel=1, out=out)
  runner.run()
  assert runner.results == {}
  assert len(runner.failed) == 4
  text = out.getvalue()
  assert "FAILED a/t lr=0.001 seed=0: exit status 1" in text
  assert "No module named tests.tools.no_such_module" in text  # the end of its log
  assert "FAILED b/t lr=0.001 seed=0: exit status 2" in text
  assert "error: --models: 'nonsense' is not NAME=SPEC" in text
  assert "FAILED b/t lr=0.001 seed=1: not run" in text
  assert "made with other flags" in text and "--x=2" in text
  assert not os.path.exists(tmp_path / "b" / "seed1")


def test_model_specs_and_run_commands(tmp_path):
  (tmp_path / "pretrained").mkdir()
  (tmp_path / "ckpt-7.index").write_text("")
  (tmp_path / "small.json").write_text("{}")
  models = sweep_grid.parse_models(
      [
          f"a={tmp_path / 'pretrained'}",
          f"b={tmp_path / 'ckpt-7'}",
          f"c={tmp_path / 'small.json'}",
          "d=swishrnn_tiny",
      ]
  )
  assert [(m.name, m.flag) for m in models] == [
      ("a", "init_checkpoint"),
      ("b", "init_checkpoint"),
      ("c", "model_config"),
      ("d", "model_config"),
  ]
  assert models[1].value == str(tmp_path / "ckpt-7") and models[3].value == "swishrnn_tiny"
  (tmp_path / "rte").mkdir()
  for name in ("train.json", "dev.json"):
    (tmp_path / name).write_text("{}")
  tasks = sweep_grid.parse_tasks(
      [f"rte={tmp_path / 'rte'}", f"squad_v2={tmp_path / 'train.json'}:{tmp_path / 'dev.json'}"]
  )
  assert [t.module for t in tasks] == [sweep_grid.GLUE_MODULE, sweep_grid.SQUAD_MODULE]
  assert "--version=2.0" in tasks[1].flags
  runs = sweep_grid.build_runs(
      models[3:],
      tasks,
      [1e-4, 3e-5],
      [0, 1],
      str(tmp_path / "out"),
      ["--max_seq_length=64"],
      {sweep_grid.SQUAD_MODULE: ["--doc_stride=32"]},
      "/p.flags",
  )
  assert len(runs) == 8
  assert [r.run_dir for r in runs[:3]] == [
      str(tmp_path / "out" / "runs" / "d" / "rte" / name)
      for name in ("lr0.0001_seed0", "lr0.0001_seed1", "lr3e-05_seed0")
  ]
  glue_run, squad_run = runs[2], runs[-1]
  # The flagfile first, so the sweep's own flags (last) win over a protocol flagfile.
  assert glue_run.args[0] == "--flagfile=/p.flags" and "--max_seq_length=64" in glue_run.args
  assert glue_run.args[-4:] == (
      f"--model_dir={glue_run.run_dir}",
      "--learning_rate=3e-05",
      "--seed=0",
      "--mode=train_and_eval",
  )
  assert "--doc_stride=32" not in glue_run.args and "--doc_stride=32" in squad_run.args
  assert f"--data_dir={tmp_path / 'rte'}" in glue_run.args
  assert "--model_config=swishrnn_tiny" in squad_run.args


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--models=bert_tiny"], "--models: 'bert_tiny' is not NAME=SPEC"),
        (["--models=b=no_such_preset"], "--models: 'b=no_such_preset'"),
        (["--tasks=rte=/no/such/dir"], "--tasks: 'rte=/no/such/dir': data dir"),
        (["--tasks=squad=/no/train.json"], "--tasks: 'squad=/no/train.json'"),
        (["--learning_rates=0.1,x"], "--learning_rates: 'x' is not a number"),
        (["--seeds=0,0"], "--seeds: 0 given more than once"),
        (["--entry_flags=--learning_rate=1"], "--entry_flags: '--learning_rate=1'"),
        (["--parallel=0"], "--parallel=0"),
    ],
)
def test_bad_flags_fail_with_the_flags_name(tmp_path, flags, message):
  task_dir = tmp_path / "rte"
  task_dir.mkdir()
  defaults = {"models": "b=bert_tiny", "tasks": f"rte={task_dir}", "learning_rates": "1e-3"}
  given = {f.split("=", 1)[0].lstrip("-") for f in flags}
  args = [f"--{k}={v}" for k, v in defaults.items() if k not in given] + flags
  result = run_sweep(*args, f"--output_dir={tmp_path / 'out'}")
  assert result.returncode == 2, result.stderr[-2000:]
  assert message in result.stderr
  assert not os.path.exists(tmp_path / "out" / "runs")


def test_real_sweep_orders_learning_rates_and_restarts(tmp_path):
  """Two real runs, 2 at a time (one seed: the aggregation over seeds is checked by hand
  above; a second seed here only doubled the fine-tuning processes)."""
  vocab = generated_tasks.write_vocab(tmp_path / "vocab.txt")
  task_dir = generated_tasks.write_rte_folder(
      tmp_path / "rte", num_train=200, num_dev=60, num_test=10, seed=0
  )
  out = tmp_path / "sweep"
  flags = [
      "--models=bert=bert_tiny",
      f"--tasks=rte={task_dir}",
      "--learning_rates=1e-3,1e-6",
      "--seeds=0",
      "--parallel=2",
      f"--entry_flags=--vocab_file={vocab} --max_seq_length=32 --train_batch_size=16 "
      "--max_train_steps=40 --steps_per_loop=10",
      f"--output_dir={out}",
  ]
  result = run_sweep(*flags)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr.count("bert/rte lr=") == 2 and "[2/2]" in result.stderr

  with open(out / "results.csv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 2
  assert sorted((float(r["learning_rate"]), int(r["seed"])) for r in rows) == [(1e-6, 0), (1e-3, 0)]
  for row in rows:
    assert row["main_metric"] == "accuracy" and row["num_examples"] == "60"
    for key in ("value", "accuracy", "seconds_per_train_step"):
      assert math.isfinite(float(row[key])), row
    assert int(row["num_train_steps"]) == 40
    assert os.path.isfile(out / row["run_dir"] / "eval_results.json")
    assert os.path.isfile(out / row["run_dir"] / "log.txt")

  def mean(lr):
    return np.mean([float(r["value"]) for r in rows if float(r["learning_rate"]) == lr])

  assert mean(1e-3) > mean(1e-6) + 0.2, rows
  markdown = (out / "summary.md").read_text(encoding="utf-8")
  assert "lr=0.001" in markdown and "lr=1e-06" in markdown
  table_line = next(line for line in markdown.splitlines() if line.startswith("| bert | rte"))
  assert table_line.count("±") == 2 and table_line.count("(n=1)") == 2
  summary = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text("utf-8"))))
  assert len(summary) == 2 and {s["n"] for s in summary} == {"1"}

  png = out / "lr_sweep.png"
  assert png.read_bytes()[:8] == PNG_MAGIC
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.image

  image = matplotlib.image.imread(str(png))
  assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100

  # The same command again: every run is already finished, nothing is trained.
  before = (out / "results.csv").read_text(encoding="utf-8")
  logs = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*/log.txt")}
  again = run_sweep(*flags)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stderr.count("skipped bert/rte") == 2
  assert "0 finished now, 2 skipped" in again.stderr
  # No run was started again: their logs are untouched.
  assert len(logs) == 2 and all(p.stat().st_mtime_ns == t for p, t in logs.items())
  assert (out / "results.csv").read_text(encoding="utf-8") == before
