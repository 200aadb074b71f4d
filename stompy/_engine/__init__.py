"""The engine: every decision of a client connection that is not moving bytes.

Sans-IO like the core below it (time and randomness come in as arguments): the engine,
its states, inboxes, connecting, receipts and requests, the calls that wait, options and
keywords. It imports the core, never a transport or a client; :mod:`stompy.engine`
publishes the part a transport of one's own needs.
"""
