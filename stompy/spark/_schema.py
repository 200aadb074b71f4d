"""The rows of a read, as Spark's DDL: what the source tells Spark before it reads.

Kept apart from the Arrow columns (:mod:`stompy.spark._arrow`) so that the processes
that only plan (load a read, make a writer, commit) never import pyarrow.
"""

from __future__ import annotations

from typing import Final

__all__ = ("READ_COLUMNS", "READ_SCHEMA")

#: The rows of a read, as a Spark DDL string.
READ_SCHEMA: Final = (
    "destination string, subscription string, message_id string, redelivered boolean, "
    "content_type string, headers map<string,string>, body binary, "
    "received_at timestamp, offset bigint"
)
#: The names of its columns, in order.
READ_COLUMNS: Final = tuple(part.split()[0] for part in READ_SCHEMA.split(", "))
