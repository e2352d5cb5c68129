"""A CancelRequest sent by hand: the 16 bytes a driver sends on a new connection to stop a query, to
any address, so a probe chooses which process a cancel reaches (a fleet's other PgBouncer).

The packet (PostgreSQL's protocol, "CancelRequest"): length 16, code 80877102, the backend pid and
the secret key the server (or pooler) gave in BackendKeyData. Nobody answers it: the server, or
PgBouncer, reads it and closes the connection, so this returns once the peer closed it (or after
CANCEL_TIMEOUT) and cannot say whether the key matched: observe the statement itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

#: Seconds to connect, send the packet and see the peer close the connection.
CANCEL_TIMEOUT = 5.0
#: PostgreSQL's CancelRequest code (1234 << 16 | 5678).
CANCEL_CODE = 80877102


def int32(value: int) -> int:
    """A 32-bit value, signed or unsigned, as the packet's signed Int32 (the same four bytes)."""
    return value - 2**32 if value >= 2**31 else value


def cancel_packet(pid: int, secret: int) -> bytes:
    """The 16-byte CancelRequest packet (pid and key as the server sent them, signed 32-bit)."""
    return struct.pack("!iiii", 16, CANCEL_CODE, pid, secret)


async def send_cancel_request(host: str, port: int, pid: int, secret: int, timeout: float = CANCEL_TIMEOUT) -> None:
    """Send one CancelRequest for (pid, secret) to host:port (TCP, or a Unix socket folder as libpq
    names one: a host that starts with '/') and wait, bounded, for the peer to close.
    OSError/TimeoutError if it cannot be delivered."""

    async def send() -> None:
        if host.startswith("/"):
            reader, writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(cancel_packet(pid, secret))
            await writer.drain()
            with contextlib.suppress(ConnectionResetError):  # some peers reset instead of closing
                await reader.read(1)  # EOF: the peer has read the packet and closed
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.wait_for(send(), timeout)
