"""The benchmarks' bare-socket client reads frames as brokers write them."""

from __future__ import annotations

import socket
import threading

from benchmarks.rawstomp import Deadline, RawConnection, Server


def test_an_eol_after_a_frames_nul_does_not_lead_the_next_frame() -> None:
    """RabbitMQ writes an EOL after each frame's NUL: the bare-socket floor of the
    latency group took it for part of the RECEIPT that came next, and failed."""
    listener = socket.create_server(("127.0.0.1", 0))
    answers = b"CONNECTED\nversion:1.2\n\n\x00\n" + b"RECEIPT\nreceipt-id:r-0\n\n\x00\n\r\n"

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.recv(4096)  # the CONNECT
            peer.sendall(answers)
            peer.recv(4096)  # until the client closes

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        port = listener.getsockname()[1]
        with RawConnection(Server("eol", "127.0.0.1", port), Deadline(10)) as conn:
            assert conn.next_frame() == b"RECEIPT\nreceipt-id:r-0\n\n"
    finally:
        server.join(10)
        listener.close()
