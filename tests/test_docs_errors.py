"""docs/errors.md keeps up with stompy.errors: every error in ``__all__`` has one entry,
nested under a base class of it, its other bases named; so a new error cannot be left
out or put in the wrong place."""

from __future__ import annotations

import re
from pathlib import Path

from stompy import errors

PAGE = Path(__file__).resolve().parent.parent / "docs" / "errors.md"

#: One entry of the tree: a list item that starts with the error's name in bold code,
#: then perhaps "(also X and Y)": the bases other than the entry it is nested in.
ENTRY = re.compile(
    r"^(?P<indent> *)\* \*\*`(?P<name>\w+)`\*\*(?: \(also (?P<also>[^)]*)\))?", re.MULTILINE
)


def entries() -> list[re.Match[str]]:
    return list(ENTRY.finditer(PAGE.read_text(encoding="utf-8")))


def test_every_error_has_one_entry() -> None:
    names = [entry["name"] for entry in entries()]
    assert sorted(names) == sorted(errors.__all__)


def test_each_entry_is_nested_under_a_base_and_names_the_others() -> None:
    open_entries: list[tuple[int, type[BaseException]]] = []  # outermost first
    for entry in entries():
        indent, cls = len(entry["indent"]), getattr(errors, entry["name"])
        while open_entries and open_entries[-1][0] >= indent:
            open_entries.pop()
        if not open_entries:
            assert cls is errors.StompError, f"{cls.__name__} is not under StompError"
            open_entries.append((indent, cls))
            continue
        parent = open_entries[-1][1]
        assert parent in cls.__bases__, f"{cls.__name__} is listed under {parent.__name__}"
        others = [b.__name__ for b in cls.__bases__ if b is not parent]
        also = entry["also"] or ""
        assert all(f"`{name}`" in also for name in others), f"{cls.__name__}: also {others}"
        open_entries.append((indent, cls))
