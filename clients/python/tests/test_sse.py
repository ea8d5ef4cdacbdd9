"""The SSE parser, offline."""

from __future__ import annotations

from typing import List

import pytest

from mgrp_client import SSEMessage, SSEParser


def parse_all(chunks: List[bytes]) -> List[SSEMessage]:
    p = SSEParser()
    out: List[SSEMessage] = []
    for c in chunks:
        out.extend(p.feed(c))
    return out


def test_event_and_data_lines():
    msgs = parse_all([b"event: below\ndata: {\"a\": 1}\n\n"])
    assert msgs == [SSEMessage(event="below", data='{"a": 1}')]


def test_default_event_name_is_message():
    assert parse_all([b"data: x\n\n"]) == [SSEMessage(event="message", data="x")]


def test_multi_line_data_is_joined_with_newlines():
    msgs = parse_all([b"event: e\ndata: one\ndata:two\ndata:  three\ndata\n\n"])
    # One leading space is stripped, no more; a bare `data` line adds an empty line.
    assert msgs[0].data == "one\ntwo\n three\n"


def test_comments_are_keepalives_not_events():
    p = SSEParser()
    assert p.feed(b":\n: keep-alive\n\n") == []
    assert p.comments == 2
    assert p.feed(b"data: 1\n\n")[0].data == "1"


def test_no_data_no_dispatch_and_event_name_resets():
    # An `event:` without data dispatches nothing, and its name does not leak into the next.
    assert parse_all([b"event: lagged\n\ndata: x\n\n"]) == [SSEMessage(event="message", data="x")]


@pytest.mark.parametrize("nl", [b"\n", b"\r\n", b"\r"])
def test_line_endings(nl: bytes):
    raw = b"event: rise" + nl + b"data: 5" + nl + nl + b"data: 6" + nl + nl
    assert [m.data for m in parse_all([raw])] == ["5", "6"]


def test_split_anywhere_byte_by_byte():
    raw = "event: fall\r\ndata: {\"v\": \"µ\"}\r\n\r\n: ping\r\n\r\nevent: x\ndata: y\n\n".encode()
    whole = parse_all([raw])
    bytewise = parse_all([raw[i : i + 1] for i in range(len(raw))])
    assert whole == bytewise
    assert [(m.event, m.data) for m in whole] == [("fall", '{"v": "µ"}'), ("x", "y")]


def test_cr_at_chunk_end_then_lf_is_one_line_ending():
    # CR ends a chunk and its LF starts the next: not an extra empty line (no early dispatch).
    msgs = parse_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert msgs == [SSEMessage(event="message", data="a\nb")]


def test_incomplete_message_at_end_is_not_dispatched():
    assert parse_all([b"event: below\ndata: {}\n"]) == []


def test_id_retry_bom_and_unknown_fields():
    msgs = parse_all([b"\xef\xbb\xbfid: 7\nretry: 3000\nfoo: bar\ndata: d\n\n"])
    assert msgs == [SSEMessage(event="message", data="d", id="7", retry=3000)]


def test_field_without_colon_and_colon_in_value():
    msgs = parse_all([b"data: a:b: c\n\n"])
    assert msgs[0].data == "a:b: c"
