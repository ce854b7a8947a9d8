"""The XLA programs a JAX process compiled, and those JAX's persistent compilation cache
served instead, counted from `jax.monitoring`'s events.

Runs of the same model differ in values only (seeds, data), so their programs are the same:
with a cache folder shared by the processes (JAX reads it from JAX_COMPILATION_CACHE_DIR;
the demo sets it for its JAX jobs), the first run of a model compiles and the others read
the compiled programs back. `describe()` is the line a run logs at its end, so a run's log
says which it did.
"""

import dataclasses

import jax

# jax.monitoring's names: one duration event per program handed to the backend (compiled,
# or read from the persistent cache), one event per program read from the cache.
_BACKEND_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


@dataclasses.dataclass
class CompilationCount:
  """Attributes: programs (handed to the backend), seconds (spent there, compiling or
  reading the cache), from_cache (programs read from the persistent compilation cache)."""

  programs: int = 0
  seconds: float = 0.0
  from_cache: int = 0

  @property
  def compiled(self) -> int:
    """Programs XLA compiled (not read from the cache)."""
    return self.programs - self.from_cache


_COUNT = None


def count() -> CompilationCount:
  """This process's live count, from the first call on (the listeners are added once)."""
  global _COUNT
  if _COUNT is None:
    _COUNT = CompilationCount()

    def on_duration(event: str, duration: float, **kwargs) -> None:
      del kwargs
      if event == _BACKEND_EVENT:
        _COUNT.programs += 1
        _COUNT.seconds += duration

    def on_event(event: str, **kwargs) -> None:
      del kwargs
      if event == _CACHE_HIT_EVENT:
        _COUNT.from_cache += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
  return _COUNT


def describe() -> str:
  """ "XLA: N programs compiled, M read from the persistent compilation cache <dir>
  (S s in all)"."""
  c = count()
  cache = jax.config.jax_compilation_cache_dir
  where = f"the persistent compilation cache {cache}" if cache else "no persistent cache"
  return (
      f"XLA: {c.compiled} programs compiled, {c.from_cache} read from {where} "
      f"({c.seconds:.1f} s in all)"
  )
