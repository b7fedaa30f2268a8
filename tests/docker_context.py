"""What `docker build .` sends to the builder, and what the dashboard needs from it. Test helper, not app code.

Two halves:

- **The build context after .dockerignore**, with Docker's own rules, ported from the Go source that applies them:
  the file is read as moby/patternmatcher's `ignorefile.ReadAll` reads it (comments only at the start of a line,
  whitespace trimmed, `filepath.Clean`, a leading `/` dropped) and a path is left out when
  `PatternMatcher.MatchesOrParentMatches` says so (moby/patternmatcher `patternmatcher.go`: the last pattern that
  matches the path or one of its parent directories decides; `!` re-includes; `*` and `?` stop at `/`; `**` spans
  directories; `dir/**` is a prefix match and `**/x` a suffix match). BuildKit uses that matcher for the context.
- **What the pages need**: every repository module reachable through `import` statements (anywhere in a file, lazy
  imports in functions included) from app.py, the pages st.navigation registers, pages/, dashboard/ and
  calculator/; and every repository file the app opens or lists while each page renders in AppTest
  (a `sys.addaudithook` on `open`, `os.scandir` and `glob.glob`, in a fresh interpreter).

    python tests/docker_context.py          # prints what the pages need that the context would not carry
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRETS = (".streamlit/secrets.toml", ".env")  # probed by Streamlit / tools if present; never shipped


# ---- .dockerignore, as Docker reads and applies it ---------------------------------------------------------------
def go_clean(path: str) -> str:
    """Go's path/filepath.Clean on a slash path: drop empty and '.' elements, resolve '..', no trailing slash."""
    rooted = path.startswith("/")
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append("..")
            continue
        out.append(part)
    cleaned = ("/" if rooted else "") + "/".join(out)
    return cleaned or "."


def go_dir(path: str) -> str:
    """Go's filepath.Dir: everything before the last slash, cleaned ('.' when there is none)."""
    return go_clean(path[:path.rfind("/") + 1])


def read_dockerignore(text: str) -> list[str]:
    """ignorefile.ReadAll: one pattern per line; '#' comments only at the very start of a line."""
    patterns = []
    for line in text.removeprefix("\ufeff").splitlines():
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        invert = line[0] == "!"
        if invert:
            line = line[1:].strip()
        if line:
            line = go_clean(line)
            if len(line) > 1 and line[0] == "/":
                line = line[1:]
        patterns.append("!" + line if invert else line)
    return patterns


_REGEX_SPECIAL = set(".+()|{}$")  # patternmatcher's shouldEscape: regexp syntax that means nothing in a glob


class Pattern:
    """One compiled pattern (patternmatcher.Pattern): an exact, prefix, suffix or regexp match."""

    def __init__(self, raw: str):
        raw = go_clean(raw.strip())
        self.exclusion = raw.startswith("!")
        if self.exclusion:
            if raw == "!":
                raise ValueError('illegal exclusion pattern: "!"')
            raw = raw[1:]
        self.text = raw
        self.kind, self.regex = self._compile(raw)

    @staticmethod
    def _compile(p: str) -> tuple[str, re.Pattern | None]:
        out, kind, i = "^", "exact", 0
        while i < len(p):
            ch = p[i]
            if ch == "*":
                if i + 1 < len(p) and p[i + 1] == "*":  # some flavour of **
                    start = i
                    i += 2
                    if i < len(p) and p[i] == "/":  # **/ is **
                        i += 1
                    if i == len(p):  # ** at the end: everything below
                        if kind == "exact":
                            kind = "prefix"
                        else:
                            out += ".*"
                            kind = "regexp"
                    else:
                        out += "(.*/)?"
                        kind = "regexp"
                    if start == 0:
                        kind = "suffix"
                    continue
                out += "[^/]*"
                kind = "regexp"
            elif ch == "?":
                out += "[^/]"
                kind = "regexp"
            elif ch in _REGEX_SPECIAL:
                out += "\\" + ch
            elif ch == "\\":
                if i + 1 < len(p):
                    out += "\\" + p[i + 1]
                    kind = "regexp"
                    i += 1
                else:
                    out += "\\\\"
            elif ch in "[]":
                out += ch
                kind = "regexp"
            else:
                out += ch
            i += 1
        if kind != "regexp":
            return kind, None
        try:
            return kind, re.compile(out + "$")
        except re.error as exc:
            raise ValueError(f"bad .dockerignore pattern {p!r}: {exc}") from None

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.text
        if self.kind == "prefix":
            return path.startswith(self.text[:-2])
        if self.kind == "suffix":
            suffix = self.text[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        return self.regex.match(path) is not None


def excluded(path: str, patterns: list[str] | list[Pattern]) -> bool:
    """PatternMatcher.MatchesOrParentMatches: True when the context leaves `path` (slash-separated) out."""
    compiled = [p if isinstance(p, Pattern) else Pattern(p) for p in patterns
                if isinstance(p, Pattern) or p.strip()]  # New() skips empty patterns
    parent = go_dir(path)
    parents = parent.split("/")
    matched = False
    for pattern in compiled:
        if pattern.exclusion != matched:  # an include that already matched, or an exception with nothing to undo
            continue
        hit = pattern.match(path)
        if not hit and parent != ".":
            hit = any(pattern.match("/".join(parents[:i + 1])) for i in range(len(parents)))
        if hit:
            matched = not pattern.exclusion
    return matched


def context_patterns(root: Path = ROOT) -> list[Pattern]:
    ignore = root / ".dockerignore"
    return [Pattern(p) for p in read_dockerignore(ignore.read_text())] if ignore.exists() else []


def in_context(path: str, patterns: list[Pattern]) -> bool:
    return not excluded(path, patterns)


def _may_reinclude(directory: str, patterns: list[Pattern]) -> bool:
    """Whether an exception could bring back something under an excluded directory (then the walk goes in)."""
    return any(p.exclusion and (p.text.startswith(directory + "/") or any(c in p.text for c in "*?[\\"))
               for p in patterns)


def copy_context(root: Path, dest: Path) -> list[str]:
    """Copy what `docker build root` would send into dest; returns the files copied (slash paths)."""
    patterns, copied = context_patterns(root), []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        dirnames[:] = [d for d in dirnames if in_context(prefix + d, patterns)
                       or _may_reinclude(prefix + d, patterns)]
        for name in filenames:
            rel = prefix + name
            if in_context(rel, patterns) and not Path(dirpath, name).is_symlink():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(dirpath, name), dest / rel)
                copied.append(rel)
    return sorted(copied)


# ---- what the dashboard needs ------------------------------------------------------------------------------------
_AST_LOCK = threading.Lock()


def _parse(text: str, filename: str = "<unknown>") -> ast.AST:
    """ast.parse one file at a time: CPython 3.11.7's parser keeps its recursion depth in shared state, and two
    threads parsing at once (tests/deploy/test_docker_context.py traces two contexts in a thread pool) can raise
    "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905, fixed in later releases)."""
    with _AST_LOCK:
        return ast.parse(text, filename=filename)


def navigation_pages(app: Path) -> list[str]:
    """The page files app.py registers: the string first argument of every st.Page(...) call."""
    pages = []
    for node in ast.walk(_parse(app.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Page"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            pages.append(node.args[0].value)
    return pages


def _module_file(name: str, root: Path) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path, root: Path) -> list[str]:
    return list(path.relative_to(root).with_suffix("").parts)[:-1]  # a/b.py and a/__init__.py: package a


def _imported_names(path: Path, root: Path) -> set[str]:
    """Every dotted module name a file imports (each parent package too), relative imports resolved."""
    names: set[str] = set()
    for node in ast.walk(_parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = _package_of(path, root)
            if node.level:
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            names.update(".".join(parts[:i + 1]) for i in range(len(parts)) if parts[0])
    return names


def imported_files(entries: list[Path], root: Path = ROOT) -> set[str]:
    """The repository's .py files reachable from `entries` through imports (third-party modules are not followed)."""
    seen: set[Path] = set()
    todo = [p.resolve() for p in entries]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_names(path, root):
            found = _module_file(name, root)
            if found is not None and found.resolve() not in seen:
                todo.append(found.resolve())
    return {p.relative_to(root).as_posix() for p in seen}


def static_entries(root: Path = ROOT) -> list[Path]:
    app = root / "app.py"
    files = [app] + [root / p for p in navigation_pages(app)]
    for folder in ("pages", "dashboard", "calculator"):
        files += sorted((root / folder).rglob("*.py"))
    return files


_TRACER = r"""
import json, os, sys
root = os.path.realpath(sys.argv[1])
opened, listed = set(), set()

def under_root(p):
    if isinstance(p, int) or p is None:
        return None
    p = os.path.realpath(os.fsdecode(p))
    return os.path.relpath(p, root) if p.startswith(root + os.sep) else None

def hook(event, args):
    if event == "open":
        rel = under_root(args[0])
        if rel and os.path.isfile(os.path.join(root, rel)):
            opened.add(rel)
    elif event in ("os.scandir", "glob.glob"):  # os.listdir is the import system's own directory cache
        rel = under_root(args[0] if args and args[0] is not None else ".")
        if rel:
            listed.add(rel)

sys.addaudithook(hook)
from streamlit.testing.v1 import AppTest
failures = []
runs = [("app.py", {}), ("app.py", {"mode": "infer", "seq": "8192", "gen": "1024"}),
        ("app.py", {"ft": "qlora", "model": "qwen3-8b"})]
for page, query in runs:
    at = AppTest.from_file(os.path.join(root, page), default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    failures += [f"{page}?{query}: {e.message}" for e in at.exception]
    failures += [f"{page}?{query}: st.error {e.value}" for e in at.error]
at = AppTest.from_file(os.path.join(root, "app.py"), default_timeout=120).run()
for page in sys.argv[2:]:
    at.switch_page(page).run()
    failures += [f"{page}: {e.message}" for e in at.exception]
    failures += [f"{page}: st.error {e.value}" for e in at.error]
print(json.dumps({"opened": sorted(opened), "listed": sorted(listed), "failures": failures}))
"""


@lru_cache(maxsize=8)
def runtime_files(root: Path = ROOT) -> tuple[frozenset[str], tuple[str, ...]]:
    """(files the app opens or lists while every page renders, page failures), traced in a fresh interpreter run
    from the repository root as `streamlit run` is. A listed directory needs every file in it."""
    pages = navigation_pages(root / "app.py")
    out = subprocess.run([sys.executable, "-c", _TRACER, str(root), *pages], cwd=root, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if out.returncode != 0:
        raise RuntimeError(f"tracing the pages failed:\n{out.stderr[-4000:]}")
    traced = json.loads(out.stdout.strip().splitlines()[-1])
    files = set(traced["opened"])
    for folder in traced["listed"]:
        directory = root / folder
        if directory.is_dir() and folder != ".":
            files.update(p.relative_to(root).as_posix() for p in directory.iterdir()
                         if p.is_file() and p.suffix != ".pyc")
    files = {f for f in files if "__pycache__" not in f and f not in SECRETS and not _in_python_env(root, f)}
    return frozenset(files), tuple(traced["failures"])


def _in_python_env(root: Path, relative: str) -> bool:
    """A file of the Python environment the tests run in (a `.venv` inside the checkout, as scripts/test.sh makes
    it in CI): the image installs its packages from requirements.txt, not from the build context."""
    env = Path(sys.prefix).resolve()
    return (root / relative).resolve().is_relative_to(env)


def dockerfile_copy_sources(root: Path = ROOT) -> set[str]:
    """The explicit sources of COPY/ADD instructions (`.` is the whole context, not a file to check)."""
    text = (root / "Dockerfile").read_text().replace("\\\n", " ")
    sources = set()
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() in ("COPY", "ADD"):
            args = [w for w in words[1:] if not w.startswith("--")]
            sources.update(go_clean(s) for s in args[:-1] if go_clean(s) != ".")
    return sources


def missing_from_context(root: Path = ROOT) -> tuple[dict[str, list[str]], list[str]]:
    """({why needed: [files the context leaves out]}, page failures while tracing)."""
    patterns = context_patterns(root)
    runtime, failures = runtime_files(root)
    needed = {"imported": imported_files(static_entries(root), root), "opened or listed at run time": runtime,
              "copied by the Dockerfile": dockerfile_copy_sources(root)}
    return {why: sorted(f for f in files if not in_context(f, patterns)) for why, files in needed.items()}, failures


if __name__ == "__main__":
    missing, failures = missing_from_context()
    print(json.dumps({"missing": missing, "failures": failures}, indent=1))
