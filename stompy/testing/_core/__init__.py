"""The test broker without I/O, compiled with mypyc together with :mod:`stompy._core`.

* :mod:`.records`: what it is configured with and what it reports (``BrokerConfig``,
  ``BrokerStats``, ``ConnectionInfo``...), a connection's states;
* :mod:`.destinations`: what it stores (messages, destinations, subscriptions);
* :mod:`.store`: :class:`~.store.MessageStore`, the destinations, routing, redelivery
  and the counters, shared by every connection;
* :mod:`.connection`: :class:`~.connection.ClientConnection`, the broker's side of one
  client connection: the server role of STOMP, and its output.

Theory of operation
-------------------
The :class:`~.store.MessageStore` holds what the connections share: the destinations
with their stored messages, and every open :class:`~.connection.ClientConnection`. A
transport (``stompy.testing._server``) opens one client connection per accepted socket
and drives it like the client core is driven:

* ``receive_data(data, now)`` parses and acts on what the client sent;
* ``data_to_send(now)`` drains the bytes to write (heart-beat EOLs included);
  ``buffers_to_send(now)`` the same as the buffers queued, a long MESSAGE body the
  stored message's own (shared by its subscribers), and ``frames_to_send(now)`` one
  item a frame (a WebSocket message each);
* ``next_deadline()`` / ``handle_timer(now)`` run the CONNECT timeout and heart-beats;
* ``receive_eof()`` / ``close()`` end it: its unacknowledged messages go back to their
  queues marked ``redelivered:true`` and its open transactions are aborted.

A frame on one connection can produce bytes on others (a SEND delivers to
subscribers elsewhere), so after any call the transport asks
:meth:`~.store.MessageStore.pop_ready` which connections got new output and wakes
their writers.

Connection states move only forward::

    AWAITING_CONNECT --CONNECT/STOMP--> CONNECTED --DISCONNECT--> CLOSING
      any error (bad frame, refused CONNECT, heart-beat loss, no CONNECT in time):
                                                     any open state --> CLOSING
      CLOSING: ERROR or RECEIPT queued, input ignored; the transport flushes and closes
      receive_eof() or close():                          any state --> CLOSED

Destinations: names starting with ``/topic/`` are topics (each message goes to every
current subscriber and is dropped when there is none); every other name is a queue
(each message goes to one subscriber, round-robin, and waits while nobody listens).

Temporary queues, the way RabbitMQ has them: a SEND whose ``reply-to`` names
``/temp-queue/NAME`` makes (once per connection and name) a queue private to that
connection, ``/reply-queue/amq.gen-...``, which the ``reply-to`` of the delivered
message names instead; the connection receives what is sent there on a subscription
it never asked for, whose id is ``/temp-queue/NAME`` (``auto`` ack). SUBSCRIBE to a
``/temp-queue/`` or ``/reply-queue/`` is refused. The queue goes with its connection
(or an UNSUBSCRIBE of that id); what is sent to it afterwards is dropped.

Flow control: a connection receives no deliveries while its unsent output is above
``write_buffer`` bytes, and a ``client`` / ``client-individual`` subscription none
while it holds ``prefetch`` unacknowledged messages. Deliveries resume when the
transport drains the output or the client acks. Messages wait in their queue (or a
topic subscription's backlog) meanwhile: storage is in memory, bounded by
``max_queue`` and ``max_stored_bytes`` (queues and backlogs together), and each
backlog by ``max_backlog_bytes``. A SEND to a queue over those bounds gets an ERROR
that names the limit; a topic backlog over them drops its oldest message (with one
WARNING per subscription): a slow subscriber never makes its topic refuse a SEND.

Unfinished frames are bounded too: all connections together hold at most
``max_partial_bytes`` of them, and a frame must be finished ``frame_timeout`` seconds
after its first byte arrived; else the connection gets an ERROR and is closed.
"""
