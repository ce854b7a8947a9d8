"""`python -m module args...` for the tests, without paying TensorFlow's start-up each time.

Importing TensorFlow, Keras and TF Text costs about 7 CPU-seconds per process, most of a
small command's run. A fork server (one per pytest worker and start-up environment) imports
them once, before any TensorFlow op, and forks a child per command line. The child is what
`python -m` / `python -c` / `python script.py` would be from there on: the requested working
directory, environment, argv and sys.path[0], stdin from /dev/null, stdout and stderr (file
descriptors 1 and 2, so TensorFlow's C++ logs too) captured, signals at their defaults, the
module run as __main__ (runpy), and a normal interpreter exit (atexit handlers, the exit
status of SystemExit, a traceback and status 1 for an uncaught exception). What it does not
reproduce: TensorFlow already being in sys.modules before the flags are parsed, so tests
of what a command imports (or when) start real processes (`subprocess`).

`run` stands for `subprocess.run(..., capture_output=True, text=True)`, `start` for
`subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)` where the output is read once
at the end (`communicate`); any other command line is started as a real process.
"""

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# Read when TensorFlow is imported: a server per value. (PYTHONPATH is applied by the child:
# its entries come right after sys.path[0], where the interpreter puts them.)
_START_UP_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")
# What `import tensorflow, tensorflow_text` loads (Keras included), no more: a served-model
# test that checks which modules loading a SavedModel imports sees the same set as before.
_PRELOADED = ("tensorflow", "tensorflow_text")
_SERVERS = {}
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LOCK = threading.Lock()


def _forkable(args) -> bool:
  args = list(args)
  if any(str(a).lstrip("-").startswith("help") for a in args[2:]):
    return False  # --help and --helpfull list the flags of every module loaded
  return (
      len(args) >= 2
      and args[0] == sys.executable
      and (args[1] in ("-m", "-c") and len(args) >= 3 or args[1].endswith(".py"))
  )


class _Server:
  """A `python -c` process that has imported _PRELOADED and forks on request."""

  def __init__(self, env):
    env = {name: value for name, value in env.items() if name != "PYTHONPATH"}
    self.folder = tempfile.mkdtemp(prefix="forkserver-")
    self.log = os.path.join(self.folder, "server.log")
    with open(self.log, "wb") as log:
      self.process = subprocess.Popen(
          [sys.executable, "-c", "from tests.support import forkserver; forkserver.serve()"],
          cwd=_REPO,
          env=env,
          stdin=subprocess.PIPE,
          stdout=subprocess.PIPE,
          stderr=log,
          text=True,
      )
    self.count = 0

  def fork(self, args, cwd, env):
    self.count += 1
    base = os.path.join(self.folder, str(self.count))
    request = {
        "args": [str(a) for a in args[1:]],
        "cwd": str(cwd),
        "env": dict(env),
        "stdout": base + ".out",
        "stderr": base + ".err",
        "status": base + ".status",
    }
    self.process.stdin.write(json.dumps(request) + "\n")
    self.process.stdin.flush()
    reply = self.process.stdout.readline()
    if not reply:
      with open(self.log, encoding="utf-8", errors="replace") as f:
        raise RuntimeError(f"the fork server died: {f.read()[-3000:]}")
    return int(reply), request

  def close(self):
    if self.process.poll() is None:
      self.process.stdin.close()
      self.process.wait(timeout=60)


def _server(env) -> _Server:
  key = tuple(env.get(name) for name in _START_UP_ENV)
  with _LOCK:
    server = _SERVERS.get(key)
    if server is None or server.process.poll() is not None:
      server = _SERVERS[key] = _Server(env)
    return server


@atexit.register
def _close_servers():
  for server in _SERVERS.values():
    server.close()


class ForkedProcess:
  """The part of `subprocess.Popen` the tests use, for a child of the fork server."""

  def __init__(self, args, cwd, env):
    self.args = list(args)
    self.returncode = None
    server = _server(env)
    with _LOCK:  # one request and its reply at a time
      self.pid, self._request = server.fork(self.args, cwd, env)

  def poll(self):
    if self.returncode is None and os.path.exists(self._request["status"]):
      with open(self._request["status"], encoding="utf-8") as f:
        self.returncode = json.load(f)
    return self.returncode

  def wait(self, timeout=None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while self.poll() is None:
      if deadline is not None and time.monotonic() > deadline:
        raise subprocess.TimeoutExpired(self.args, timeout)
      time.sleep(0.05)
    return self.returncode

  def communicate(self, timeout=None):
    self.wait(timeout)
    outputs = []
    for name in ("stdout", "stderr"):
      with open(self._request[name], encoding="utf-8", errors="replace") as f:
        outputs.append(f.read())
    return tuple(outputs)

  def send_signal(self, signal_number):
    if self.poll() is None:
      try:
        os.kill(self.pid, signal_number)
      except ProcessLookupError:
        pass

  def kill(self):
    self.send_signal(9)


def start(args, cwd, env):
  """`subprocess.Popen(args, cwd=cwd, env=env, stdout=PIPE, stderr=PIPE, text=True)`."""
  cwd = os.getcwd() if cwd is None else cwd
  if not _forkable(args):
    return subprocess.Popen(
        list(args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
  return ForkedProcess(args, cwd, env)


def run(args, cwd, env, timeout=None) -> subprocess.CompletedProcess:
  """`subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=...)`."""
  process = start(args, cwd, env)
  try:
    stdout, stderr = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate()
    raise
  return subprocess.CompletedProcess(list(args), process.returncode, stdout, stderr)


# ---- The server side. ---------------------------------------------------------------------


def serve():
  """Imports _PRELOADED, then forks a child per request line on stdin (JSON), answers its
  pid on stdout, and writes each child's exit status (-signal when killed) to its file."""
  import importlib
  import select

  for name in _PRELOADED:
    importlib.import_module(name)
  children = {}
  open_requests = True
  while open_requests or children:
    readable = select.select([sys.stdin], [], [], 0.05)[0] if open_requests else []
    if readable:
      line = sys.stdin.readline()
      if not line:
        open_requests = False
      else:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
          _child(request)  # runs the command; its exit ends the child here
        children[pid] = request["status"]
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
    elif not open_requests:
      time.sleep(0.05)
    while children:
      pid, status = os.waitpid(-1, os.WNOHANG)
      if pid == 0:
        break
      path = children.pop(pid, None)
      if path:
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
          json.dump(code, f)
        os.replace(path + ".tmp", path)


def _child(request):
  import runpy
  import signal
  import types

  for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD):
    signal.signal(number, signal.SIG_DFL)
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  stdin = os.open(os.devnull, os.O_RDONLY)
  os.dup2(stdin, 0)
  os.close(stdin)
  for fd, name in ((1, "stdout"), (2, "stderr")):
    out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, fd)
    os.close(out)
  sys.stdin = open(0, encoding="utf-8", closefd=False)
  sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
  sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
  kind, rest = request["args"][0], request["args"][1:]
  python_path = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
  sys.path[1:1] = [os.path.abspath(p) for p in python_path]
  if kind == "-m":
    sys.argv = ["-m", *rest[1:]]
    sys.path[0] = os.getcwd()
    runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
  elif kind == "-c":
    sys.argv = ["-c", *rest[1:]]
    sys.path[0] = ""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(rest[0], "<string>", "exec"), main.__dict__)
  else:
    sys.argv = [kind, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(kind))
    runpy.run_path(kind, run_name="__main__")
  sys.exit(0)
