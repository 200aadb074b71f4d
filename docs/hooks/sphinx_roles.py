"""A griffe extension for the API reference: Sphinx roles in docstrings become code.

stompy's docstrings use roles such as ``:class:`ServerError``` (readable in the source
and in ``help()``); Markdown has no roles, so ``:class:`X``` is rendered as `` `X` ``.
Loaded by mkdocstrings (see ``mkdocs.yml``); needs griffe, which it brings.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` to ``target`` in code style, in every docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
