"""The agent <-> stub wire: 4-byte big-endian length + UTF-8 JSON."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from ratchet.sandbox.protocol import MAX_FRAME_BYTES, ProtocolError, decode_body, encode, read_frame, recv_frame


def test_encode_is_length_prefixed_json():
    frame = encode({"type": "ready", "pid": 7, "handlers": ["é"]})
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert decode_body(frame[4:]) == {"type": "ready", "pid": 7, "handlers": ["é"]}


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1, 2]", b'{"no": "type"}', b"{bad json"])
def test_bad_bodies_are_protocol_errors(body):
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_oversized_frames_are_refused_both_ways():
    with pytest.raises(ProtocolError):
        encode({"type": "done", "result": "x" * MAX_FRAME_BYTES})
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1))
        with pytest.raises(ProtocolError, match="over"):
            recv_frame(b)


def test_blocking_reader_handles_split_frames_and_clean_eof():
    a, b = socket.socketpair()
    with b:
        frames = encode({"type": "run", "n": 1}) + encode({"type": "cancel"})
        for i in range(len(frames)):  # one byte at a time
            a.sendall(frames[i:i + 1])
        a.close()
        assert recv_frame(b) == {"type": "run", "n": 1}
        assert recv_frame(b) == {"type": "cancel"}
        assert recv_frame(b) is None


def test_eof_mid_frame_is_a_protocol_error():
    a, b = socket.socketpair()
    with b:
        a.sendall(encode({"type": "run"})[:-2])
        a.close()
        with pytest.raises(ProtocolError, match="middle"):
            recv_frame(b)


async def test_async_reader_matches_the_blocking_one():
    reader = asyncio.StreamReader()
    reader.feed_data(encode({"type": "done", "task_id": "t"}) + encode({"type": "heartbeat"})[:3])
    reader.feed_eof()
    assert await read_frame(reader) == {"type": "done", "task_id": "t"}
    with pytest.raises(ProtocolError):
        await read_frame(reader)
    empty = asyncio.StreamReader()
    empty.feed_eof()
    assert await read_frame(empty) is None
