"""Every ```python block of docs/*.md and README.md runs, so the documentation cannot rot.

The conventions (docs/contributing.md tells writers the same):

* The blocks of one page run in order in one namespace, like a notebook. The namespace
  starts with ``url``, the address of an in-process broker started for the page,
  ``broker``, that broker (a :class:`stompy.testing.Broker`), and ``stompy`` imported.
* ``<!-- not-tested: REASON -->`` on the line before a block: shown, not run. For
  what cannot run here (another broker's address, a file on the reader's machine).
* ``<!-- pytest -->`` on the line before a block: the block is a test module, run by
  pytest in a subprocess, with stompy's ``stomp_broker`` fixture available.

Each block runs with a time limit, and a page must leave no connection open.
mkdocs itself is not needed here: ``nox -s docs`` builds the site.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import stompy
from stompy.testing import run_broker

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
BLOCK_TIMEOUT = 30.0

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
NOT_TESTED = re.compile(r"^<!--\s*not-tested:\s*(?P<reason>\S.*?)\s*-->$")
PYTEST = re.compile(r"^<!--\s*pytest\s*-->$")
MARKER = re.compile(r"^<!--\s*(not-tested|pytest)\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    marker: str  # "", "not-tested" or "pytest"
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, with the marker before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        words = opening["info"].strip().lstrip("{").split()
        language = words[0].lstrip(".").lower() if words else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[j])
            j += 1
        else:
            pytest.fail(f"{page.relative_to(ROOT)}:{i + 1}: the code block is never closed")
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = ""
        if MARKER.match(before):
            if PYTEST.match(before):
                marker = "pytest"
            elif NOT_TESTED.match(before):
                marker = "not-tested"
            else:
                pytest.fail(f"{page.relative_to(ROOT)}:{i}: a not-tested marker needs a reason")
        code = textwrap.dedent("\n".join(body)) if indent else "\n".join(body)
        found.append(Block(page, i + 1, language, marker, code + "\n"))
        i = j + 1
    return found


INCLUDE = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"$')


def included(block: Block) -> Path | None:
    """The file a block only includes (``--8<-- "examples/x.py"``), if that is all it is."""
    match = INCLUDE.match(block.code.strip())
    return ROOT / match["path"] if match else None


def python_blocks(page: Path) -> list[Block]:
    """The page's Python blocks, less those that include a file (tested where it lives)."""
    return [b for b in blocks(page) if b.language in ("python", "py") and included(b) is None]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


def run_bounded(block: Block, namespace: dict[str, Any]) -> None:
    """Execute one block in a thread, failing the test if it takes too long."""
    code = compile(block.code, str(block), "exec")
    failure: list[BaseException] = []

    def target() -> None:
        try:
            exec(code, namespace)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"docs {block}", daemon=True)
    thread.start()
    thread.join(BLOCK_TIMEOUT)
    if thread.is_alive():
        pytest.fail(f"{block}: still running after {BLOCK_TIMEOUT} s")
    if failure:
        raise AssertionError(f"{block} failed: {failure[0]!r}") from failure[0]


def run_pytest(tests: list[Block], tmp_path: Path) -> None:
    """Run test-module blocks, each a module of its own, in one pytest subprocess."""
    for block in tests:
        module = tmp_path / f"test_docs_{block.page.stem}_{block.line}.py"
        module.write_text(block.code, encoding="utf-8")
    # hypothesis's plugin is not needed and takes seconds to import.
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["-p", "no:hypothesispytest", "-W", "error", str(tmp_path)]
    if not entry_points(group="pytest11", name="stompy"):
        argv += ["-p", "stompy.testing.pytest_plugin"]  # not installed: load it by name
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    where = ", ".join(str(b) for b in tests)
    assert result.returncode == 0, f"{where}: pytest failed\n{result.stdout}{result.stderr}"
    assert " passed" in result.stdout


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.name)
def test_page_runs(page: Path) -> None:
    with run_broker() as broker:
        namespace: dict[str, Any] = {
            "__name__": "__docs__",
            "stompy": stompy,
            "url": broker.url,
            "broker": broker,
        }
        for block in python_blocks(page):
            if not block.marker:
                run_bounded(block, namespace)
        broker.wait_until(lambda: not broker.connections, timeout=10.0)


def test_test_module_blocks_pass(tmp_path: Path) -> None:
    tests = [b for p in PAGES for b in python_blocks(p) if b.marker == "pytest"]
    assert tests
    run_pytest(tests, tmp_path)


def test_markers_are_used_sparingly() -> None:
    every = [b for p in PAGES for b in python_blocks(p)]
    skipped = [b for b in every if b.marker == "not-tested"]
    assert len(every) >= 30
    assert len(skipped) <= len(every) // 4, [str(b) for b in skipped]


def test_every_page_is_in_the_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", config, re.MULTILINE))
    assert listed == {p.name for p in DOCS.glob("*.md")}


def test_included_files_exist_and_are_tested() -> None:
    from tests.test_examples import ELSEWHERE, EXPECTED

    includes = [i for p in PAGES for b in blocks(p) if (i := included(b)) is not None]
    assert includes
    for path in includes:
        assert path.is_file(), path
        assert path.parent.name == "examples", path
        assert path.name in EXPECTED or path.name in ELSEWHERE, path


def test_block_parser() -> None:
    page = DOCS / "contributing.md"
    found = blocks(page)
    kinds = {(b.language, b.marker) for b in found}
    assert ("python", "not-tested") in kinds
    assert ("python", "pytest") in kinds
    assert ("python", "") in kinds
