"""The project's layout as a specification (issue 20; docs/architecture.md): the import contracts of .importlinter
hold, no module imports another module's private name, each package says what it owns and may import, no package
has more than ~15 modules at one level, and no source file runs past ~400 lines."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("calculator", "dashboard", "validation")
MAX_MODULES = 15  # per package, at one level
MAX_LINES = 400


def _python_files(*tops: str):
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_import_contracts_hold():
    """lint-imports over .importlinter: the layers from the CLI down to the core, calculator never importing the
    dashboard or a UI package, no network in the math, no cycles."""
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-logo", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _private_imports(path: Path) -> list[str]:
    """`from a.b import _name` where a.b is another module of the project (not the importing package's own
    __init__ re-export)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{_module_name(path)}: from {node.module} import {alias.name}")
    return out


def test_no_module_imports_another_modules_private_name():
    found = [x for f in _python_files(*PACKAGES) for x in _private_imports(f)]
    assert found == []


def test_the_private_name_check_sees_one(tmp_path):
    """The check above is not vacuous: it finds a private import when there is one."""
    f = ROOT / "calculator" / "_layout_probe.py"
    f.write_text("from calculator.stages.terms import _replayed\n")
    try:
        assert _private_imports(f) == ["calculator._layout_probe: from calculator.stages.terms import _replayed"]
    finally:
        f.unlink()


@pytest.mark.parametrize("top", PACKAGES)
def test_every_package_says_what_it_owns_and_may_import(top):
    for init in sorted((ROOT / top).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc) > 80, f"{init.relative_to(ROOT)}: a one-paragraph docstring saying what the package owns"
        if top == "calculator" and init.parent != ROOT / "calculator":
            assert "May import" in doc or "may import" in doc, f"{init.relative_to(ROOT)}: say what it may import"


@pytest.mark.parametrize("top", PACKAGES + ("tests",))
def test_no_package_has_more_than_fifteen_modules_at_one_level(top):
    for folder in sorted({p.parent for p in (ROOT / top).rglob("*.py")}):
        modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py", "conftest.py")]
        if top == "tests":
            modules = [p for p in modules if not p.name.startswith("test_")]  # helpers; test files mirror modules
        assert len(modules) <= MAX_MODULES, f"{folder.relative_to(ROOT)}: {len(modules)} modules"


def test_no_source_file_runs_past_four_hundred_lines():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _python_files(*PACKAGES, "pages", "benchmarks", "tests")
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    long += [f"app.py: {n}" for n in [len((ROOT / "app.py").read_text().splitlines())] if n > MAX_LINES]
    assert long == []
