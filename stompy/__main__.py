"""``python -m stompy``: the ``stompy`` command."""

from __future__ import annotations

from stompy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
