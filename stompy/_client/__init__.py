"""What users hold: ``Connection`` and ``AsyncConnection``, their messages,
subscriptions and transactions. Thin: each call runs the engine's steps over its
transport. :mod:`stompy` re-exports them.
"""
