"""The caching-allocator replay in C (allocator.c, rules.h): the rules of calculator/allocator/fast.py, with its calls, at
C speed. It is optional. `python -m calculator.allocator.native` compiles it with the C compiler Python was built with (gcc or
clang, and Python's headers); scripts/test.sh, scripts/run_app.sh and the Dockerfile run that. Without a build the
pure Python replay runs, and every figure is the same (tests/allocator/test_allocator_native.py).

A build is named for a hash of allocator.c and rules.h and for the interpreter (EXT_SUFFIX), so an edited source or another
Python never loads a stale one. Builds go to calculator/allocator/native/build/ ($LLM_MEM_NATIVE_DIR to put them elsewhere).
LLM_MEM_NATIVE=0 in the environment keeps the pure Python replay.

May import: the standard library only (it is driven by calculator/allocator/step_order.py).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import subprocess
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

SOURCE = Path(__file__).with_name("allocator.c")  # the Python type; it includes rules.h, the allocator's rules
HEADER = Path(__file__).with_name("rules.h")


def build_dir() -> Path:
    return Path(os.environ.get("LLM_MEM_NATIVE_DIR") or Path(__file__).with_name("build"))


def built_name() -> str:
    """The file a build of this source (allocator.c and rules.h) for this interpreter is written to."""
    digest = hashlib.sha256(SOURCE.read_bytes() + HEADER.read_bytes()).hexdigest()[:16]
    return f"_allocator.{digest}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def compile_command(out: Path) -> list[str]:
    """The compiler call: Python's own LDSHARED (the linker line extension modules are built with), its
    position-independent flags, -O2 and its headers."""
    ldshared = sysconfig.get_config_var("LDSHARED")
    if not ldshared:
        raise RuntimeError("cannot build here: this Python has no LDSHARED (no C extension build support)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise RuntimeError(f"cannot build here: no Python headers (Python.h) in {include}; install them (Debian: "
                           "python3-dev) or keep the pure Python replay")
    return [*shlex.split(ldshared), *shlex.split(sysconfig.get_config_var("CCSHARED") or ""), "-O2",
            f"-I{include}", str(SOURCE), "-o", str(out)]


def build(dest: Path | None = None) -> Path:
    """Compile allocator.c into `dest` (build_dir()) and return the module's path; an existing build is kept.
    Raises RuntimeError with the compiler's message when it cannot."""
    dest = Path(dest or build_dir())
    out = dest / built_name()
    if out.exists():
        return out
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=out.suffix, dir=dest)
    os.close(fd)
    try:
        try:
            done = subprocess.run(compile_command(Path(tmp)), capture_output=True, text=True, timeout=300)
        except OSError as exc:  # no compiler on PATH
            raise RuntimeError(f"cannot build here: cannot run the C compiler: {exc}") from None
        if done.returncode != 0:
            raise RuntimeError(f"the C compiler failed:\n{done.stderr.strip()}")
        os.replace(tmp, out)  # atomic: a concurrent loader sees the whole file or none
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    for old in dest.glob(f"_allocator.*{suffix}"):  # builds of earlier sources for this interpreter
        if old != out:
            old.unlink(missing_ok=True)
    return out


def load_from(path: Path) -> type:
    """The Allocator type of a built module."""
    spec = importlib.util.spec_from_file_location("calculator.allocator.native._allocator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Allocator


@lru_cache(maxsize=1)
def allocator_type() -> type | None:
    """The compiled Allocator if this source is built for this interpreter (and LLM_MEM_NATIVE is not 0), else
    None: the caller runs calculator/allocator/fast.py."""
    if os.environ.get("LLM_MEM_NATIVE", "1") == "0":
        return None
    path = build_dir() / built_name()
    if not path.exists():
        return None
    try:
        return load_from(path)
    except (ImportError, OSError):  # built for another platform, or damaged: the Python replay is exact too
        return None
