"""The CancelRequest drivers/cancel.py sends (slice F's cancel_routed sends it too)."""

from __future__ import annotations

import struct

from leakcheck.drivers.cancel import cancel_packet


def test_a_cancel_request_is_sixteen_bytes_of_length_code_pid_and_key() -> None:
    packet = cancel_packet(4242, -7)
    assert len(packet) == 16
    assert struct.unpack("!iiii", packet) == (16, 80877102, 4242, -7)
