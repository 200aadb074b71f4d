"""The test broker's sans-IO core (records, store and routing, the per-connection
session), compiled with mypyc together with :mod:`stompy._core`: a broker run from the
wheel takes a SEND in about half the instructions.
"""
