"""The sans-IO core: frames, the parser and the encoder, heart-beats, events, the protocol.

No I/O, no clock, nothing of stompy above it: it imports only the standard library,
``typing_extensions``, :mod:`stompy.errors` and the leaves beside it (``stompy._checks``,
``stompy._mypyc``). The wheel's build compiles every module of this folder with mypyc
(and ``cscan.pyx``, the parser's and the encoder's hot loops, with Cython, loaded by
``accelerator.py``): see ``hatch_build.py``.
"""
