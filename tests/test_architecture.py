"""The package's layering, read from the code's own imports (function-local ones too).

Each module belongs to one layer. A module may import from its own folder and from lower
layers only; two folders on the same layer (training/ and tasks/, say) never import each
other. No two files import each other, directly or around a longer circle. A new module must
be placed in LAYERS below before this test passes, which is the point: its place is decided,
not drifted into.
"""

import ast
import importlib
import inspect
import pathlib
from typing import Dict, List, Set

REPO = pathlib.Path(__file__).resolve().parent.parent

# (module prefix, layer, group). Longest matching prefix wins; a higher layer may import a
# lower one; the same group may import itself; nothing else.
LAYERS = [
    ("recurrent_bert", 0, "base"),  # __init__, errors, config, model_dir, io_utils, cli
    ("recurrent_bert.layers", 1, "layers"),
    ("recurrent_bert.data", 1, "data"),
    ("recurrent_bert.models", 2, "models"),
    # Every model file is opened and written here, below everything that uses a model.
    ("recurrent_bert.saving", 2.5, "saving"),
    ("recurrent_bert.training", 3, "training"),
    ("recurrent_bert.tasks", 4, "tasks"),  # the pieces every kind shares
    # One subpackage per task kind, on the shared pieces; no kind imports another.
    ("recurrent_bert.tasks.classification", 4.5, "tasks.classification"),
    ("recurrent_bert.tasks.span", 4.5, "tasks.span"),
    ("recurrent_bert.tasks.tagging", 4.5, "tasks.tagging"),
    ("recurrent_bert.tasks.multiple_choice", 4.5, "tasks.multiple_choice"),
    ("recurrent_bert.convert", 4, "convert"),
    ("recurrent_bert.serving", 5, "serving"),
    ("recurrent_bert.jobs", 5, "jobs"),
    ("recurrent_bert.flags", 6, "flags"),
    ("recurrent_bert.pretrain", 7, "commands"),
    ("recurrent_bert.finetune_glue", 7, "commands"),
    ("recurrent_bert.finetune_squad", 7, "commands"),
    ("recurrent_bert.finetune_tagging", 7, "commands"),
    ("recurrent_bert.finetune_multiple_choice", 7, "commands"),
    ("recurrent_bert.extract_features", 7, "commands"),
    ("recurrent_bert.export", 7, "commands"),
    ("recurrent_bert.summary", 7, "commands"),
    ("recurrent_bert.smoke", 7, "commands"),
    ("recurrent_bert.demo", 7, "demo"),
    ("recurrent_bert.tools", 8, "tools"),
    ("recurrent_bert.commands", 9, "console commands"),
    ("tools", 10, "old tool paths"),  # shims: `python -m tools.X` for one more release
]
BASE_MODULES = {
    "recurrent_bert",
    "recurrent_bert.errors",
    "recurrent_bert.config",
    "recurrent_bert.model_dir",
    "recurrent_bert.weights_file",
    "recurrent_bert.io_utils",
    "recurrent_bert.cli",
    "recurrent_bert.progress",
}


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(REPO).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _modules() -> Dict[str, pathlib.Path]:
  files = list((REPO / "recurrent_bert").rglob("*.py")) + list((REPO / "tools").rglob("*.py"))
  return {_module_name(p): p for p in files}


def _imports(path: pathlib.Path, name: str, known: Set[str]) -> Set[str]:
  """Project modules `path` imports anywhere in its body, resolved to files."""
  is_package = path.name == "__init__.py"
  found = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = name.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        module = ".".join(base + ([node.module] if node.module else []))
      else:
        module = node.module
      # `from pkg import mod` imports pkg/mod.py; `from mod import name` imports mod.py.
      targets = [
          f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
          for alias in node.names
      ]
    else:
      continue
    for target in targets:
      while target and target not in known:
        target = target.rpartition(".")[0]
      if target and target != name:
        found.add(target)
  return found


def _layer(module: str):
  if module in BASE_MODULES:
    return 0, "base"
  matches = [
      (prefix, layer, group)
      for prefix, layer, group in LAYERS
      if module == prefix or module.startswith(prefix + ".")
  ]
  prefix, layer, group = max(matches, key=lambda m: len(m[0]))
  assert (
      prefix != "recurrent_bert"
  ), f"{module} is in no layer: add it to LAYERS in tests/test_architecture.py"
  return layer, group


def _graph() -> Dict[str, Set[str]]:
  modules = _modules()
  return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _goes_up(module: str, target: str) -> bool:
  """Whether `module` importing `target` leaves its group for one not below it."""
  (layer, group), (target_layer, target_group) = _layer(module), _layer(target)
  return target_group != group and target_layer >= layer


def test_every_import_goes_down_or_stays_in_its_folder():
  def described(module: str) -> str:
    layer, group = _layer(module)
    return f"{module} ({group}, layer {layer})"

  upward = [
      f"{described(module)} imports {described(target)}"
      for module, targets in _graph().items()
      for target in targets
      if _goes_up(module, target)
  ]
  assert not upward, "\n".join(sorted(upward))


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
  """Strongly connected components with more than one file (Tarjan)."""
  index: Dict[str, int] = {}
  low: Dict[str, int] = {}
  stack: List[str] = []
  on_stack: Set[str] = set()
  found = []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for succ in graph.get(node, ()):
      if succ not in index:
        visit(succ)
        low[node] = min(low[node], low[succ])
      elif succ in on_stack:
        low[node] = min(low[node], index[succ])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return found


def test_no_import_cycles_between_files():
  cycles = _cycles(_graph())
  assert not cycles, "files that import each other: " + "; ".join(map(" <-> ".join, cycles))


def _kind_comparisons(tree: ast.AST, kind_names: Set[str]) -> List[int]:
  """Lines where `<something>.kind` (or `kind`) is compared with a task kind's name."""
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Compare):
      continue
    sides = [node.left, *node.comparators]
    names_kind = any(
        (isinstance(s, ast.Attribute) and s.attr == "kind")
        or (isinstance(s, ast.Name) and s.id == "kind")
        for s in sides
    )
    strings = {
        c.value
        for s in sides
        for c in ast.walk(s)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    if names_kind and strings & kind_names:
      found.append(node.lineno)
  return found


def test_only_the_registry_compares_a_task_kinds_name():
  from recurrent_bert.models import task_kinds

  names = set(task_kinds.KINDS)
  found = [
      f"{path.relative_to(REPO)}:{line}"
      for module, path in _modules().items()
      if module != "recurrent_bert.models.task_kinds"
      for line in _kind_comparisons(ast.parse(path.read_text(encoding="utf-8")), names)
  ]
  assert not found, "look the kind up in models/task_kinds.py instead: " + ", ".join(found)
  # The reference cases: the two forms the registry replaced are seen; other kinds are not.
  planted = 'if info.kind == "span": pass\nif kind not in ("classifier", "tagger"): pass\n'
  assert _kind_comparisons(ast.parse(planted), names) == [1, 2]
  assert not _kind_comparisons(ast.parse('if source.kind == "converted": pass'), names)


def test_each_task_kind_is_one_subpackage_that_imports_only_downward():
  from recurrent_bert.models import task_kinds
  from recurrent_bert.training.task_adapter import TaskAdapter

  kind_packages = {group for _, _, group in LAYERS if group.startswith("tasks.")}
  tasks_dir = REPO / "recurrent_bert" / "tasks"
  on_disk = {f"tasks.{p.name}" for p in tasks_dir.iterdir() if (p / "__init__.py").exists()}
  assert on_disk == kind_packages, "every subpackage of tasks/ is a kind with its LAYERS row"
  # Each kind the models know names the subpackage that trains it, and each subpackage
  # trains one or more of them through its adapter.
  named = {f"tasks.{kind.tasks_package}" for kind in task_kinds.KINDS.values()}
  assert named == kind_packages
  for group in kind_packages:
    adapter = importlib.import_module(f"recurrent_bert.{group}.adapter")
    assert any(
        inspect.isclass(value) and issubclass(value, TaskAdapter) and value is not TaskAdapter
        for value in vars(adapter).values()
    ), f"{group}.adapter defines no TaskAdapter"
  # The reference cases: a shared piece importing a kind, and one kind importing another,
  # go up; a kind importing a shared piece, or itself, does not.
  assert _goes_up("recurrent_bert.tasks.metrics", "recurrent_bert.tasks.span.squad")
  assert _goes_up("recurrent_bert.tasks.tagging.adapter", "recurrent_bert.tasks.span.squad_windows")
  assert not _goes_up("recurrent_bert.tasks.span.adapter", "recurrent_bert.tasks.pair_features")
  assert not _goes_up("recurrent_bert.tasks.span.adapter", "recurrent_bert.tasks.span.squad")


def test_the_checks_see_an_upward_import_and_a_cycle():
  # The reference cases: a planted upward edge and a planted circle are reported.
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
  assert _layer("recurrent_bert.training.loop")[0] > _layer("recurrent_bert.models.encoder")[0]
  assert _layer("recurrent_bert.tasks.span.squad")[1] != _layer("recurrent_bert.training.loop")[1]
  graph = _graph()
  # pretrain imports its runner inside main(): function-local imports are seen too.
  assert "recurrent_bert.training.pretraining_runner" in graph["recurrent_bert.pretrain"]


# What reads a checkpoint or weights file: TensorFlow's readers and Checkpoint objects,
# the weights file's readers, HDF5 itself. Only saving/ (and weights_file.py, the format)
# may use them; everything else opens a model with `saving.open_model`. The importers read
# other projects' checkpoints (google-research/bert's TF1 release), not model dirs.
_FILE_READERS = {
    "tf.train": {"load_checkpoint", "latest_checkpoint", "list_variables", "Checkpoint"},
    "weights_file": {"load_weights", "assign", "WeightsFile", "read_attributes"},
}
_READER_MODULES = {"h5py"}


def _file_reads(tree: ast.AST) -> List[int]:
  """Lines that read a model file without `saving` (the names in _FILE_READERS)."""
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute):
      owner = ast.unparse(node.value)
      if any(owner.endswith(o) and node.attr in names for o, names in _FILE_READERS.items()):
        found.append(node.lineno)
    elif isinstance(node, ast.ImportFrom) and node.module:
      owner = node.module.rpartition(".")[2] if "weights_file" in node.module else node.module
      names = _FILE_READERS.get(owner, set())
      if any(alias.name in names for alias in node.names):
        found.append(node.lineno)
    elif isinstance(node, ast.Import):
      if any(alias.name.split(".")[0] in _READER_MODULES for alias in node.names):
        found.append(node.lineno)
  return found


def test_only_saving_reads_checkpoint_and_weights_files():
  allowed = (
      "recurrent_bert.saving",
      "recurrent_bert.weights_file",
      "recurrent_bert.convert.importers",
  )
  found = [
      f"{path.relative_to(REPO)}:{line}"
      for module, path in _modules().items()
      if not module.startswith(allowed)
      for line in _file_reads(ast.parse(path.read_text(encoding="utf-8")))
  ]
  assert not found, "open models with recurrent_bert.saving instead: " + ", ".join(found)
  # The reference cases: each way of reading a file directly is seen; writing is not.
  planted = (
      "tf.train.Checkpoint(model=v).read(p)\n"
      "r = tf.train.load_checkpoint(p)\n"
      "weights_file.load_weights(m, p)\n"
      "from recurrent_bert.weights_file import assign\n"
      "import h5py\n"
      "weights_file.save_weights(m, p)\n"
  )
  assert sorted(_file_reads(ast.parse(planted))) == [1, 2, 3, 4, 5]
