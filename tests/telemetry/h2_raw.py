"""A gRPC call over a hand-made HTTP/2 connection, so a test can send metadata bytes grpc would not.

grpc's own client refuses metadata values that are not printable ASCII; what a server does with
them (any bytes, UTF-8 or not) needs a client that writes the frames itself. Headers go out as
HPACK literals (no Huffman, no indexing) on a fresh connection, so the server's answer on it is
literal too (grpc core writes new names as literals), which ``_literals`` reads back.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["grpc_status"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0, 1, 3, 4, 7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """HPACK's integer: ``value`` in a ``prefix_bits`` prefix, continued in 7-bit groups."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = bytearray([first | limit]), value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + bytes([value]))


def _literal(name: bytes, value: bytes) -> bytes:
    """A header as a literal, never indexed, with a new name (no Huffman)."""
    return b"\x10" + _integer(len(name), 7) + name + _integer(len(value), 7) + value


def _read_integer(data: bytes, at: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value, at = data[at] & limit, at + 1
    if value < limit:
        return value, at
    shift = 0
    while True:
        byte, at = data[at], at + 1
        value += (byte & 127) << shift
        shift += 7
        if byte < 128:
            return value, at


def _literals(block: bytes) -> dict[bytes, bytes]:
    """The literal, non-Huffman headers with new names in an HPACK block (the rest skipped)."""
    found: dict[bytes, bytes] = {}
    at = 0
    while at < len(block):
        byte = block[at]
        if byte & 0x80:  # indexed: a static-table entry such as :status 200
            _, at = _read_integer(block, at, 7)
            continue
        if byte & 0xE0 == 0x20:  # dynamic table size update
            _, at = _read_integer(block, at, 5)
            continue
        prefix = 6 if byte & 0x40 else 4
        index, at = _read_integer(block, at, prefix)
        strings = []
        for _ in range(1 if index else 2):
            huffman = bool(block[at] & 0x80)
            length, at = _read_integer(block, at, 7)
            strings.append(None if huffman else block[at : at + length])
            at += length
        if not index and strings[0] is not None and strings[1] is not None:
            found[strings[0]] = strings[1]
    return found


def grpc_status(port: int, path: str, metadata: list[tuple[bytes, bytes]], message: bytes) -> str:
    """One unary call; its ``grpc-status``, or ``reset``/``goaway``/``closed`` when refused so."""
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"127.0.0.1"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *metadata,
    ]
    block = b"".join(_literal(name, value) for name, value in headers)
    body = b"\x00" + struct.pack(">I", len(message)) + message
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            _PREFACE
            + _frame(_SETTINGS, 0, 0, b"")
            + _frame(_HEADERS, _END_HEADERS, 1, block)
            + _frame(_DATA, _END_STREAM, 1, body)
        )
        buffer = b""
        while True:
            while len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
                piece = sock.recv(65536)
                if not piece:
                    return "closed"
                buffer += piece
            length = int.from_bytes(buffer[:3], "big")
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
            if kind == _SETTINGS and not flags & _ACK:
                sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
            elif kind == _GOAWAY:
                return "goaway"
            elif stream == 1 and kind == _RST_STREAM:
                return "reset"
            elif stream == 1 and kind == _HEADERS:
                status = _literals(payload).get(b"grpc-status")
                if status is not None:
                    return status.decode("ascii")
