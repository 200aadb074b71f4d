"""A mkdocs hook: the API reference lists each public module's ``__all__``, generated.

``docs/reference.md`` holds the prose and, where a module's names go, a line
``<!-- api: stompy.testing -->``; this hook replaces it with one ``::: module.Name``
directive per name of that module's ``__all__``, in its order. So a public name is
documented by being public, and a name dropped from ``__all__`` leaves the page.
``__all__`` is read from the source (a literal tuple, which tests/test_public_api.py
requires), not imported: building the docs needs no runtime dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- api: ([\w.]+) -->$", re.MULTILINE)


def module_all(module: str) -> tuple[str, ...]:
    """``module``'s ``__all__``, read from its source."""
    path = ROOT.joinpath(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            return tuple(value)
    raise LookupError(f"{source} has no literal __all__")


def expand(markdown: str) -> str:
    """``markdown`` with each marker replaced by its module's directives. Submodules
    listed in an ``__all__`` (``stompy.errors``) have their own section, so they are
    left out here."""

    def directives(match: re.Match[str]) -> str:
        module = match.group(1)
        names = [
            name
            for name in module_all(module)
            if not ROOT.joinpath(*module.split("."), name).is_dir()
            and not ROOT.joinpath(*module.split("."), f"{name}.py").is_file()
        ]
        return "\n\n".join(f"::: {module}.{name}" for name in names)

    return MARKER.sub(directives, markdown)


def on_page_markdown(markdown: str, *, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "reference.md":
        return expand(markdown)
    return markdown
