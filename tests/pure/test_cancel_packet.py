"""The CancelRequest drivers/cancel.py sends (slice F's cancel_routed sends it too)."""

from __future__ import annotations

import struct

from leakcheck.drivers.cancel import cancel_packet, int32


def test_a_cancel_request_is_sixteen_bytes_of_length_code_pid_and_key() -> None:
    packet = cancel_packet(4242, -7)
    assert len(packet) == 16
    assert struct.unpack("!iiii", packet) == (16, 80877102, 4242, -7)


def test_a_key_answered_unsigned_is_sent_as_the_same_four_bytes() -> None:
    assert int32(2**32 - 7) == -7 and int32(4242) == 4242 and int32(-7) == -7
    assert cancel_packet(4242, int32(2**32 - 7))[12:] == (2**32 - 7).to_bytes(4, "big")
