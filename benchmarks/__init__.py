"""stompy's benchmark suite: ``python -m benchmarks [GROUP ...] [--quick]``.

Each group (``codec``, ``clients``, ...) lives in its own module and registers itself
with :func:`benchmarks._core.register`; a group returns :class:`benchmarks._core.Row`
objects, which ``__main__`` prints as a table and stores as JSON in
``benchmarks/results/``. The method (same bytes, alternating rounds, medians, results
verified so a broken contender cannot win) is described in ``docs/performance.md``.
"""
