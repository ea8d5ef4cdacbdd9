"""The client against a scripted HTTP server on loopback (no agent, no root): requests,
errors, tokens, and event streams (chunked SSE split anywhere, keep-alives, multi-line data,
`lagged`, closing, read timeouts)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

import pytest

from mgrp_client import (
    AgentUnreachable,
    ApiError,
    Client,
    Event,
    Lagged,
    ProtocolError,
    RequestTimeout,
)

from test_models import REC, rec

Handler = Callable[["Req"], None]


class Req(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes: Dict[str, Handler] = {}
    seen: List[Tuple[str, Dict[str, List[str]], Dict[str, str]]] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        u = urlsplit(self.path)
        self.query = parse_qs(u.query)
        self.seen.append((u.path, self.query, dict(self.headers)))
        h = self.routes.get(u.path)
        if h is None:
            self.send_json(404, {"error": "no such endpoint: see /v1/openapi.yaml"})
        else:
            h(self)

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        self.body = json.loads(self.rfile.read(n) or b"null")
        self.do_GET()

    def do_DELETE(self) -> None:  # noqa: N802
        self.body = None
        self.do_GET()

    def send_json(self, status: int, v: object, raw: Optional[bytes] = None, ctype: str = "application/json") -> None:
        body = json.dumps(v).encode() if raw is None else raw
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, b: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@pytest.fixture()
def server() -> Iterator[Tuple[str, Dict[str, Handler], list]]:
    routes: Dict[str, Handler] = {}
    seen: list = []
    handler = type("H", (Req,), {"routes": routes, "seen": seen})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", routes, seen
    finally:
        srv.shutdown()
        srv.server_close()


def ev_json(kind: str, value: float, **kw: object) -> str:
    d = {"kind": kind, "path": REC["path"], "metric": "avail_bw", "value": value, "threshold": None,
         "reference": None, "change_pct": None, "record": rec(value=value)}
    d.update(kw)
    return json.dumps(d)


def test_json_endpoints_params_and_headers(server):
    url, routes, seen = server
    routes["/v1/estimate"] = lambda r: r.send_json(200, REC)
    routes["/v1/paths"] = lambda r: r.send_json(200, [{"path": "a->b", "metric": "rtt"}])
    routes["/v1/history"] = lambda r: r.send_json(200, {"points": [], "source": "agg_60s", "complete": True})
    routes["/v1/records"] = lambda r: r.send_json(200, [REC, REC])
    routes["/metrics"] = lambda r: r.send_json(200, None, raw=b"# EOF\n", ctype="text/plain")
    c = Client(url, token="s3cret-token-0123456789")
    assert c.estimate(path="1.2.3.4->5.6.7.8", max_age=0.5, wait=3).value == REC["value"]
    p, q, h = seen[-1]
    assert q == {"path": ["1.2.3.4->5.6.7.8"], "metric": ["avail_bw"], "max_age": ["0.5s"], "wait": ["3s"]}
    assert h["Authorization"] == "Bearer s3cret-token-0123456789"
    assert c.paths()[0].metric == "rtt"
    c.history(peer="198.18.3.2", metric="capacity", step="1h", count=24, end_ns=10**18)
    assert seen[-1][1] == {"peer": ["198.18.3.2"], "metric": ["capacity"], "step": ["1h"], "count": ["24"], "end_ns": ["1000000000000000000"]}
    assert len(c.records(peer="x", from_ns=1, to_ns=2, limit=5)) == 2
    assert seen[-1][1]["limit"] == ["5"] and seen[-1][1]["from_ns"] == ["1"]
    assert c.metrics_text() == "# EOF\n"
    # Without a token, no Authorization header at all.
    Client(url).paths()
    assert "Authorization" not in seen[-1][2]


def test_api_errors_carry_the_agents_reason(server):
    url, routes, _ = server
    routes["/v1/estimate"] = lambda r: r.send_json(409, {"error": "no schedule to measure it"})
    routes["/v1/history"] = lambda r: r.send_json(400, None, raw=b"", ctype="text/plain")
    routes["/v1/records"] = lambda r: r.send_json(500, None, raw=b"store on fire", ctype="text/plain")
    routes["/v1/paths"] = lambda r: r.send_json(200, None, raw=b"<html>", ctype="text/html")
    c = Client(url)
    with pytest.raises(ApiError) as e:
        c.estimate(path="a->b", max_age="1s")
    assert (e.value.status, e.value.message) == (409, "no schedule to measure it")
    assert str(e.value) == "HTTP 409: no schedule to measure it"
    with pytest.raises(ApiError) as e:
        c.history(path="a->b")
    assert e.value.status == 400 and e.value.message == "Bad Request"
    with pytest.raises(ApiError, match="store on fire"):
        c.records(path="a->b")
    with pytest.raises(ApiError) as e:
        c.schedules()  # not routed: the server's 404
    assert e.value.status == 404 and "no such endpoint" in e.value.message
    with pytest.raises(ProtocolError, match="not JSON"):
        c.paths()


def test_unreachable_and_timeouts(server):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(AgentUnreachable, match="refused"):
        Client(f"http://127.0.0.1:{port}").paths()
    url, routes, _ = server
    routes["/v1/paths"] = lambda r: time.sleep(1.0)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout):
        Client(url, timeout=0.2).paths()
    assert time.monotonic() - t0 < 0.9


def test_base_url_forms():
    assert Client("127.0.0.1:7241").base_url == "http://127.0.0.1:7241"
    assert Client("http://h:1/prefix/").base_url == "http://h:1/prefix"
    with pytest.raises(ValueError):
        Client("ftp://h")
    with pytest.raises(ValueError):
        Client("http://h", token="a", token_file="/dev/null")


def test_event_stream_parses_split_chunks_keepalives_and_lagged(server):
    url, routes, seen = server
    fall = ev_json("fall", 3.0, reference=10.0, change_pct=-70.0)
    cut = fall.index(', "value"') + 1  # between two members: a newline there is still JSON
    body = (
        ": keep-alive\n\n"
        f"event: estimate\ndata: {ev_json('estimate', 1.0)}\n\n"
        f"event: below\r\ndata: {ev_json('below', 2.0, threshold=5.0)}\r\n\r\n"
        'event: lagged\ndata: {"missed": 7}\n\n'
        # Multi-line data: JSON split over two data lines is still one JSON text.
        f"event: fall\ndata: {fall[:cut]}\ndata: {fall[cut:]}\n\n"
    ).encode()

    def sse(r: Req) -> None:
        r.start_sse()
        for i in range(0, len(body), 37):  # chunks that cut lines, CRLFs and UTF-8 anywhere
            r.chunk(body[i : i + 37])
        r.end_chunks()

    routes["/v1/events"] = sse
    with Client(url).events(peer="198.18.3.2", below="5mbit", fall_pct=30) as s:
        got = list(s)
        assert s.keepalives == 1
    assert seen[-1][1] == {"peer": ["198.18.3.2"], "metric": ["avail_bw"], "below": ["5mbit"], "fall_pct": ["30"]}
    assert [g.kind for g in got] == ["estimate", "below", "lagged", "fall"]
    assert isinstance(got[0], Event) and got[0].value == 1.0
    assert isinstance(got[1], Event) and got[1].threshold == 5.0
    assert isinstance(got[2], Lagged) and got[2].missed == 7 and got[2].is_lagged
    assert isinstance(got[3], Event) and got[3].change_pct == -70.0 and got[3].reference == 10.0
    assert s.closed


def test_event_stream_errors_are_raised_at_subscription(server):
    url, routes, _ = server
    routes["/v1/events"] = lambda r: r.send_json(400, {"error": "fall_pct above 100 can never happen"})
    with pytest.raises(ApiError) as e:
        Client(url).events(path="a->b", fall_pct=200)
    assert e.value.status == 400 and "fall_pct" in e.value.message
    routes["/v1/events"] = lambda r: r.send_json(200, [])
    with pytest.raises(ProtocolError, match="event-stream"):
        Client(url).events(path="a->b")


def _endless(r: Req) -> None:
    r.start_sse()
    try:
        r.chunk(f"event: estimate\ndata: {ev_json('estimate', 1.0)}\n\n".encode())
        while True:  # keep-alives only, until the client goes away
            time.sleep(0.05)
            r.chunk(b":\n\n")
    except OSError:
        pass


def test_close_from_another_thread_ends_iteration_and_connection(server):
    url, routes, _ = server
    routes["/v1/events"] = _endless
    s = Client(url).events(path="a->b")
    assert next(s).kind == "estimate"
    threading.Timer(0.3, s.close).start()
    t0 = time.monotonic()
    assert list(s) == []  # blocked reading keep-alives until closed
    assert 0.2 < time.monotonic() - t0 < 3
    assert s.closed


def test_duration_ends_iteration_cleanly(server):
    url, routes, _ = server
    routes["/v1/events"] = _endless
    t0 = time.monotonic()
    got = list(Client(url).events(path="a->b", duration=0.5))
    assert [g.kind for g in got] == ["estimate"]
    assert 0.4 < time.monotonic() - t0 < 2


def test_read_timeout_when_the_stream_goes_silent(server):
    url, routes, _ = server

    def silent(r: Req) -> None:
        r.start_sse()
        r.chunk(f"event: estimate\ndata: {ev_json('estimate', 1.0)}\n\n".encode())
        time.sleep(2)

    routes["/v1/events"] = silent
    s = Client(url).events(path="a->b", read_timeout=0.3)
    assert next(s).kind == "estimate"
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout):
        next(s)
    assert time.monotonic() - t0 < 1.5
    assert s.closed


def test_garbage_event_data_is_a_protocol_error(server):
    url, routes, _ = server

    def bad(r: Req) -> None:
        r.start_sse()
        r.chunk(b"event: below\ndata: not json\n\n")
        r.end_chunks()

    routes["/v1/events"] = bad
    with pytest.raises(ProtocolError, match="no JSON"):
        list(Client(url).events(path="a->b"))


QUERY = {
    "id": "q0123456789abcdef", "owner": "127.0.0.1", "created_ns": 1, "peer": "198.18.3.2:7240",
    "mode": "event", "method": "chirp", "metric": "jitter", "every_s": 5.0,
    "budget_bytes_per_min": 1048576, "below": None, "exceeds": 0.002, "status": "running",
    "path": "198.18.1.2->198.18.3.2", "last_ns": None, "last_error": None,
    "budget_exhausted": False,
    "counters": {"measurements": 1, "estimates_stored": 4, "skipped_for_budget": 0,
                 "cut_by_budget": 0, "errors": 0, "probe_bytes": 9000},
    "events": 0, "last_event": None, "result": None,
}


def test_queries_create_list_show_delete(server):
    url, routes, seen = server
    got: Dict[str, object] = {}

    def queries(r: Req) -> None:
        if r.command == "POST":
            got["body"] = r.body
            r.send_json(201, QUERY)
        else:
            r.send_json(200, [QUERY])

    def one(r: Req) -> None:
        if r.command == "DELETE":
            r.send_json(200, {"deleted": QUERY["id"]})
        else:
            r.send_json(200, dict(QUERY, status="failing", last_error="connection refused"))

    routes["/v1/queries"] = queries
    routes["/v1/queries/" + QUERY["id"]] = one
    c = Client(url)
    q = c.create_query("198.18.3.2", "event", method="chirp", metric="jitter", every=5, exceeds="2ms", budget="1mb")
    assert got["body"] == {"peer": "198.18.3.2", "mode": "event", "method": "chirp", "metric": "jitter",
                           "every": "5s", "budget": "1mb", "exceeds": "2ms"}
    assert (q.id, q.exceeds, q.counters.probe_bytes) == (QUERY["id"], 0.002, 9000)
    assert [x.id for x in c.queries()] == [QUERY["id"]]
    s = c.query(QUERY["id"])
    assert (s.status, s.last_error) == ("failing", "connection refused")
    c.delete_query(QUERY["id"])
    assert seen[-1][0] == "/v1/queries/" + QUERY["id"]


def test_query_refusals_carry_the_agents_reason(server):
    url, routes, _ = server
    routes["/v1/queries"] = lambda r: r.send_json(400, {"error": "unknown metric \"goodput\""})
    with pytest.raises(ApiError) as e:
        Client(url).create_query("198.18.3.2", metric="goodput")
    assert e.value.status == 400 and "goodput" in e.value.message


def test_query_events_are_typed(server):
    url, routes, seen = server

    def stream(r: Req) -> None:
        r.start_sse()
        d = {"kind": "query", "query": QUERY["id"], "condition": "exceeds", "holds": True,
             "path": REC["path"], "metric": "jitter", "value": 0.003, "threshold": 0.002,
             "record": rec(value=0.003)}
        r.chunk(b"event: query\ndata: " + json.dumps(d).encode() + b"\n\n")
        r.end_chunks()

    routes["/v1/events"] = stream
    with Client(url).query_events(QUERY["id"]) as evs:
        e = next(evs)
    assert seen[-1][1] == {"query": [QUERY["id"]]}
    assert (e.kind, e.condition, e.holds, e.threshold) == ("query", "exceeds", True, 0.002)
