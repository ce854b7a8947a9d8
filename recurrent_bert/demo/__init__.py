"""The end-to-end demo: `python -m recurrent_bert.demo` (`make demo`).

What lives here, one concern per module:
  __main__.py           the command: its flags, the settings from them, the wiring
  settings.py           Settings (the flags, resolved) and the work dir's settings check
  stages.py             the stage engine: markers, reuse, --redo, progress and ETA
  pipeline.py           the plan (Demo): which stages, in which order, for the settings
  work_paths.py         every path under the work dir (WorkPaths, which Demo builds on)
  stage_estimates.py    each stage's time estimate, for the ETA
  data_stages.py        corpus, vocabulary, records and task: commands and results
  model_stages.py       pretraining, the sweep, export, query and report: the same
  origin_task.py        the corpus as documents with their source, and the fine-tuning task
                        "which library (or file) is this passage from?"
  report.py             the report folder (python -m recurrent_bert.demo.report, a stage)
  run_results.py        a run's results as the report reads them (losses, step times,
                        parameter counts, display names)
  query_saved_model.py  the SavedModel queried with raw text in a fresh process (a stage)

A command package: it may import any module of recurrent_bert (the subprocess pool is the
shared `recurrent_bert.jobs`), and nothing imports it. Its driver never imports
TensorFlow: every stage that needs it (report, query, the entry points) runs as its own
process. query_saved_model.py imports only the standard library, tensorflow and
tensorflow_text. This file imports nothing, so that running one module of the package
loads only what that module needs.
"""
