"""The transports: they move bytes and keep time for the engine.

``blocking``: a socket and a select thread; ``asynchronous``: anyio tasks (asyncio or
trio). They import the engine and the core, never a client.
"""
