"""recurrent_bert.demo.query_saved_model: a program that needs nothing of this package.

The demo's query stage runs it on a real SavedModel (tests/demo/test_pipeline.py); here,
its imports are read from its source, function-local ones included.
"""

import ast
import sys

from recurrent_bert.demo import model_stages


def test_imports_only_the_standard_library_tensorflow_and_tensorflow_text():
  with open(model_stages.QUERY_PROGRAM, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported.update(alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      assert node.level == 0, "no relative imports: it runs as a file, not in the package"
      imported.add(node.module.split(".")[0])
  assert {"tensorflow", "tensorflow_text"} <= imported
  assert imported - {"tensorflow", "tensorflow_text"} <= set(sys.stdlib_module_names), imported
