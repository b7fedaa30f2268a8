"""The image holds everything the pages need: the build context, after .dockerignore with Docker's own matching
rules (tests/docker_context.py, ported from moby/patternmatcher), carries every module the app imports and every
file it opens; the context alone renders every page; and it carries no secrets or repository internals."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from docker_context import (ROOT, Pattern, context_patterns, copy_context, excluded, imported_files,
                                  in_context, missing_from_context, read_dockerignore, runtime_files,
                                  static_entries)

# ---- the matcher: cases from moby/patternmatcher's patternmatcher_test.go (TestMatches, MatchesOrParentMatches) --
MATCHES = [  # (pattern, path, excluded?)
    ("**", "file", True), ("**", "dir/file", True), ("**/", "dir/file", True), ("**/**", "dir/file", True),
    ("dir/**", "dir/file", True), ("dir/**", "dir/dir2/file", True), ("**/dir", "dir", True),
    ("**/dir", "dir/file", True), ("**/dir2/*", "dir/dir2/file", True), ("**/dir2/*", "dir/dir2/file/", True),
    ("**/dir2/**", "dir/dir2/dir3/file", True), ("**file", "file", True), ("**file", "dir/file", True),
    ("**/file", "dir/dir/file", True), ("**/file*", "dir/dir/file.txt", True),
    ("**/file*txt", "dir/dir/file.txt", True), ("**/**/*.txt", "dir/dir/file.txt", True),
    ("**/**/*.txt2", "dir/dir/file.txt", False), ("**/*.txt", "file.txt", True), ("a**/*.txt", "a/dir/file.txt", True),
    ("a/*.txt", "a/dir/file.txt", False), ("a/*.txt", "a/file.txt", True), ("a/*.txt**", "a/file.txt", True),
    ("a[b-d]e", "ae", False), ("a[b-d]e", "ace", True), ("a[b-d]e", "aae", False), ("a[^b-d]e", "aze", True),
    (".*", ".foo", True), (".*", "foo", False), ("abc.def", "abcdef", False), ("abc.def", "abc.def", True),
    ("abc?def", "abcZdef", True), ("abc?def", "abcdef", False), ("**/foo/bar", "dir/dir2/foo/bar", True),
    ("abc/**", "abc", False), ("abc/**", "abc/def/ghi", True), ("**/.foo", ".foo", True), ("**/.foo", "bar.foo", False),
    ("a(b)c/def", "a(b)c/def", True), ("a(b)c/def", "a(b)c/xyz", False), ("a.|)$(}+{bc", "a.|)$(}+{bc", True),
    ("dist/*.whl", "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", True),
    ("a\\*b", "a*b", True), ("a\\\\", "a\\", True),
    # a pattern naming a directory leaves out everything under it; "*" stops at a slash, but its parent matches
    ("docs", "docs/x/README.md", True), ("*.md", "docs/README.md", False), ("*", "docs/README.md", True),
    ("/docs/", "docs/a", True),
]


@pytest.mark.parametrize("pattern,path,expected", MATCHES)
def test_matcher_agrees_with_dockers_own_test_table(pattern, path, expected):
    assert excluded(path, read_dockerignore(pattern)) is expected


@pytest.mark.parametrize("patterns,path,expected", [
    (["**", "!util/docker/web"], "util/docker/web/foo", False),
    (["**", "!util/docker/web", "util/docker/web/foo"], "util/docker/web/foo", True),
    (["**", "!dist/*.whl"], "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", False),
    (["docs", "!docs/README.md"], "docs/README.md", False),
    (["!fileutils.go", "*.go"], "fileutils.go", True),  # an exception before the pattern undoes nothing
    # Docker's documentation example: every .md but README*.md, and README-secret.md after all
    (["*.md", "!README*.md", "README-secret.md"], "README.md", False),
    (["*.md", "!README*.md", "README-secret.md"], "README-secret.md", True),
    (["*.md", "!README*.md", "README-secret.md"], "CHANGES.md", True),
])
def test_last_matching_pattern_decides(patterns, path, expected):
    assert excluded(path, patterns) is expected


def test_dockerignore_is_read_as_docker_reads_it():
    text = "\ufeff# comment\n  spaced.txt  \n\n/rooted\n! kept/again/\n #not a comment\ndir//sub/./x/../y\n"
    assert read_dockerignore(text) == ["spaced.txt", "rooted", "!kept/again", "#not a comment", "dir/sub/y"]


def test_bad_patterns_are_refused():
    with pytest.raises(ValueError):
        Pattern("!")
    with pytest.raises(ValueError):
        Pattern("a[")


# ---- what the pages need, and the context --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def needed() -> set[str]:
    files, failures = runtime_files(ROOT)
    assert not failures, failures  # every page renders from the repository with no error
    return files | imported_files(static_entries(ROOT), ROOT)


def test_pages_need_the_validation_harness_and_the_goldens(needed):
    # What the Accuracy page reads: the guard below is only worth something if these are found as needed.
    assert {"validation/trace/compare.py", "validation/published_comparison.json", "validation/CALIBRATION.md",
            ".streamlit/config.toml", "presets/gpus.json", "calculator/stages/estimate.py", "pages/accuracy.py"} <= needed
    assert sum(f.startswith("tests/golden/") and f.endswith(".json") for f in needed) >= 100
    assert sum(f.startswith("presets/models/") for f in needed) >= 40


def test_the_old_dockerignore_would_have_left_the_accuracy_page_without_them(needed):
    old = read_dockerignore(".git\n.venv\n.ci\ntests\nvalidation\nbenchmarks\n__pycache__\n*.pyc\nDockerfile\n")
    left_out = {f for f in needed if excluded(f, old)}
    assert {"validation/trace/compare.py", "validation/published_comparison.json"} <= left_out
    assert any(f.startswith("tests/golden/") for f in left_out)


def test_build_context_holds_every_module_and_file_the_pages_need():
    missing, failures = missing_from_context(ROOT)
    assert not failures
    assert missing == {"imported": [], "opened or listed at run time": [], "copied by the Dockerfile": []}


def test_the_build_context_alone_renders_every_page(tmp_path):
    context, without = tmp_path / "context", tmp_path / "without-validation"
    copied = copy_context(ROOT, context)
    assert "app.py" in copied and ".streamlit/config.toml" in copied
    # and the same check notices when the harness is missing (what the image had before)
    shutil.copytree(context, without, ignore=lambda d, names: ["validation"])
    # the two traces are separate interpreters on separate copies: run side by side (~5 s each)
    with ThreadPoolExecutor(2) as pool:
        traced, traced_without = pool.map(runtime_files, (context, without))
    assert traced[1] == ()
    assert any("No module named 'validation'" in f for f in traced_without[1])


@pytest.mark.parametrize("path", [".git/config", ".venv/bin/python", ".streamlit/secrets.toml", ".env",
                                  "tests/test_app.py", "tests/e2e/conftest.py", "scripts/test.sh", "benchmarks/x.py",
                                  "test-artifacts/page.png", "dashboard/__pycache__/state.cpython-311.pyc",
                                  "calculator/x.pyc", "Dockerfile", ".dockerignore", "README.md"])
def test_context_carries_no_secrets_or_repository_internals(path):
    assert not in_context(path, context_patterns(ROOT))
