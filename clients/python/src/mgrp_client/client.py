"""The HTTP client of an mgrp agent (``crates/service/openapi.yaml``), standard library only."""

from __future__ import annotations

import collections
import datetime as _dt
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import __version__
from .errors import AgentUnreachable, ApiError, MgrpError, ProtocolError, RequestTimeout
from .models import (
    Event,
    Lagged,
    Passive,
    PathMetric,
    Query,
    QueryEvent,
    Record,
    ScaleAnswer,
    Schedule,
    datetime_to_ns,
)
from .sse import SSEMessage, SSEParser

__all__ = ["Client", "EventStream", "DEFAULT_URL", "Duration", "Time"]

DEFAULT_URL = "http://127.0.0.1:7241"

#: A duration: a string the agent parses (``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"``),
#: seconds as a number, or a ``timedelta``.
Duration = Union[str, int, float, _dt.timedelta]

#: A point in time: Unix nanoseconds or a ``datetime`` (naive means local time).
Time = Union[int, _dt.datetime]

#: What an event stream yields.
EventItem = Union[Event, Lagged, QueryEvent]

# The agent waits this long for an on-demand measurement unless told (`wait`), at most 120 s.
_DEFAULT_WAIT_S = 20.0
_MAX_WAIT_S = 120.0


def _fmt_seconds(s: float) -> str:
    if s < 0:
        raise ValueError(f"a duration cannot be negative: {s}")
    if s == int(s):
        return f"{int(s)}s"
    return f"{s:.9f}".rstrip("0").rstrip(".") + "s"


def _duration(v: Duration) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, _dt.timedelta):
        return _fmt_seconds(v.total_seconds())
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"a duration is a string like '30s', seconds, or a timedelta; got {v!r}")
    return _fmt_seconds(float(v))


_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def _seconds(v: Duration) -> Optional[float]:
    """A duration in seconds, or None if the string is not one the client understands (the
    agent will say what is wrong with it)."""
    if isinstance(v, _dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(ns|us|ms|s|m|h|)\s*", str(v).lower())
    if not m:
        return None
    try:
        return float(m.group(1)) * _UNITS[m.group(2)]
    except ValueError:
        return None


def _ns(v: Time) -> int:
    if isinstance(v, _dt.datetime):
        return datetime_to_ns(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"a time is Unix nanoseconds (int) or a datetime; got {v!r}")
    return v


def _num(v: Union[int, float, str]) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected a number, got {v!r}")
    return repr(v) if isinstance(v, float) else str(v)


class Client:
    """A client of one agent's HTTP API.

    ``base_url`` is the agent's ``http`` address (``http://IP:PORT``, optionally with a path
    prefix behind a reverse proxy; ``https://`` works with ``ssl_context``). Clients on the
    agent's own host need no token; any other client sends ``token`` (or the contents of
    ``token_file``) as ``Authorization: Bearer``. ``timeout`` bounds connecting and each
    answer, in seconds (on-demand estimates get the time they may take on top).

    Every method raises :class:`ApiError` when the agent refuses (its reason in ``message``),
    :class:`AgentUnreachable` when there is no connection, :class:`RequestTimeout` when the
    answer does not come, and :class:`ProtocolError` when it is not what the API promises; all
    derive from :class:`MgrpError`. A client holds no connection between calls and may be
    shared by threads.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: Optional[str] = None,
        timeout: float = 30.0,
        *,
        token_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        u = urllib.parse.urlsplit(base_url if "//" in base_url else "http://" + base_url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"base_url must be http:// or https://, got {base_url!r}")
        if not u.hostname:
            raise ValueError(f"base_url has no host: {base_url!r}")
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        self.base_url = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path.rstrip("/"), "", ""))
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._prefix = u.path.rstrip("/")
        self._netloc = u.netloc.rpartition("@")[2]
        self.token = token
        self.timeout = timeout
        self._ssl = ssl_context

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, token={'***' if self.token else None}, timeout={self.timeout})"

    # -- the endpoints ----------------------------------------------------------------------

    def paths(self) -> List[PathMetric]:
        """The (path, metric) pairs that have estimates."""
        v = self._json("/v1/paths")
        return [PathMetric.from_json(x) for x in _array(v, "/v1/paths")]

    def schedules(self) -> List[Schedule]:
        """The paths this agent keeps fresh, with their counters."""
        v = self._json("/v1/schedules")
        return [Schedule.from_json(x) for x in _array(v, "/v1/schedules")]

    def passive(self) -> List[Passive]:
        """The passive sources (Wren on an interface's TCP traffic), with their counters."""
        v = self._json("/v1/passive")
        return [Passive.from_json(x) for x in _array(v, "/v1/passive")]

    def estimate(
        self,
        path: Optional[str] = None,
        peer: Optional[str] = None,
        metric: str = "avail_bw",
        max_age: Optional[Duration] = None,
        wait: Optional[Duration] = None,
    ) -> Record:
        """The current estimate of ``path`` (``SRC->DST``) or of the scheduled path to
        ``peer`` (``IP`` or ``IP:PORT``). With ``max_age``, an older estimate (or none) makes
        the agent measure now (scheduled paths only; 409 otherwise) and answer with the new
        one, or 504 after ``wait`` (agent's default 20 s, at most 120 s)."""
        params = _target(path, peer, metric)
        timeout = self.timeout
        if max_age is not None:
            params["max_age"] = _duration(max_age)
            w = _DEFAULT_WAIT_S if wait is None else _seconds(wait)
            timeout = max(timeout, min(w if w is not None else _MAX_WAIT_S, _MAX_WAIT_S) + 10.0)
        if wait is not None:
            params["wait"] = _duration(wait)
        return Record.from_json(self._json("/v1/estimate", params, timeout=timeout))

    def history(
        self,
        path: Optional[str] = None,
        peer: Optional[str] = None,
        metric: str = "avail_bw",
        step: Duration = "60s",
        count: int = 60,
        end_ns: Optional[Time] = None,
    ) -> ScaleAnswer:
        """A metric's history: ``count`` steps of ``step`` (whole seconds) ending at ``end_ns``
        (default now); steps with at least one estimate, oldest first."""
        params = _target(path, peer, metric)
        params["step"] = _duration(step)
        params["count"] = _num(count)
        if end_ns is not None:
            params["end_ns"] = str(_ns(end_ns))
        return ScaleAnswer.from_json(self._json("/v1/history", params))

    def records(
        self,
        path: Optional[str] = None,
        peer: Optional[str] = None,
        metric: str = "avail_bw",
        from_ns: Optional[Time] = None,
        to_ns: Optional[Time] = None,
        limit: Optional[int] = None,
    ) -> List[Record]:
        """Raw estimates in ``[from_ns, to_ns)`` (default: the hour before now), oldest first,
        at most ``limit`` (agent's default 10000). ``records_to_dataframe`` makes a table."""
        params = _target(path, peer, metric)
        if from_ns is not None:
            params["from_ns"] = str(_ns(from_ns))
        if to_ns is not None:
            params["to_ns"] = str(_ns(to_ns))
        if limit is not None:
            params["limit"] = _num(limit)
        v = self._json("/v1/records", params)
        return [Record.from_json(x) for x in _array(v, "/v1/records")]

    def metrics_text(self) -> str:
        """The Prometheus / OpenMetrics exposition of ``/metrics``, as text."""
        _, body = self._get("/metrics", {}, accept="text/plain, application/openmetrics-text")
        return body.decode("utf-8", errors="replace")

    def openapi(self) -> str:
        """The agent's API description (OpenAPI 3.1, YAML text)."""
        _, body = self._get("/v1/openapi.yaml", {}, accept="application/yaml")
        return body.decode("utf-8", errors="replace")

    def events(
        self,
        path: Optional[str] = None,
        peer: Optional[str] = None,
        metric: str = "avail_bw",
        below: Optional[Union[float, int, str]] = None,
        rise_pct: Optional[float] = None,
        fall_pct: Optional[float] = None,
        change_pct: Optional[float] = None,
        *,
        read_timeout: Optional[float] = 60.0,
        duration: Optional[float] = None,
    ) -> "EventStream":
        """Subscribe to a path's metric: an iterator of :class:`Event` (and :class:`Lagged`
        notices when this subscriber fell behind), read from the agent's SSE stream.

        Without conditions every new estimate is an ``estimate`` event. ``below`` (in the
        metric's unit; bandwidths also as ``"5mbit"``) gives ``below``/``above`` events;
        ``rise_pct``/``fall_pct`` (``change_pct`` sets both) give ``rise``/``fall``.

        The subscription is made at once (a bad parameter raises :class:`ApiError` here).
        ``read_timeout``: seconds without any byte, keep-alives included (the agent sends one
        every 15 s), after which the stream is taken for dead and :class:`RequestTimeout` is
        raised (None: wait forever). ``duration``: stop iterating, without error, after this
        many seconds. Close the stream (``close()``, or use it as a context manager) to close
        the connection.
        """
        params = _target(path, peer, metric)
        if below is not None:
            params["below"] = _num(below)
        if rise_pct is not None:
            params["rise_pct"] = _num(rise_pct)
        if fall_pct is not None:
            params["fall_pct"] = _num(fall_pct)
        if change_pct is not None:
            params["change_pct"] = _num(change_pct)
        target = self._url("/v1/events", params)
        url = self._full(target)
        conn, sock, resp = self._open(target, "text/event-stream", self.timeout)
        try:
            if resp.status != 200:
                body = _read_all(resp, url)
                raise _api_error(resp, body, url)
            ctype = resp.getheader("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise ProtocolError(f"{url}: expected text/event-stream, got {ctype!r}")
        except BaseException:
            conn.close()
            raise
        return EventStream(conn, sock, resp, url, read_timeout=read_timeout, duration=duration)

    def create_query(
        self,
        peer: str,
        mode: str = "once",
        *,
        method: Optional[str] = None,
        metric: Optional[str] = None,
        every: Optional[Duration] = None,
        budget: Optional[Union[int, str]] = None,
        below: Optional[Union[float, int, str]] = None,
        exceeds: Optional[Union[float, int, str]] = None,
    ) -> Query:
        """Ask the agent to measure ``peer`` (``IP`` or ``IP:PORT`` of its agent): ``once``
        now, ``periodic`` every ``every``, or ``event``: every ``every``, notifying
        (:meth:`query_events`) when ``metric`` falls ``below`` or ``exceeds`` a threshold
        (bandwidths also as ``"10mbit"``, delays as ``"5ms"``). ``budget``: probe bytes a
        minute (``"2mb"``). A refusal (bad field, no route, too many queries) raises
        :class:`ApiError` with the agent's reason."""
        body: Dict[str, Any] = {"peer": peer, "mode": mode}
        if method is not None:
            body["method"] = method
        if metric is not None:
            body["metric"] = metric
        if every is not None:
            body["every"] = _duration(every)
        if budget is not None:
            body["budget"] = budget
        if below is not None:
            body["below"] = below
        if exceeds is not None:
            body["exceeds"] = exceeds
        return Query.from_json(self._call("POST", "/v1/queries", body))

    def queries(self) -> List[Query]:
        """Every query the agent holds, with its status and newest result."""
        v = self._json("/v1/queries")
        return [Query.from_json(x) for x in _array(v, "/v1/queries")]

    def query(self, id: str) -> Query:
        """One query's status (raises :class:`ApiError` 404 if there is none)."""
        return Query.from_json(self._json("/v1/queries/" + urllib.parse.quote(id, safe="")))

    def delete_query(self, id: str) -> None:
        """Stop and forget a query."""
        self._call("DELETE", "/v1/queries/" + urllib.parse.quote(id, safe=""), None)

    def query_events(
        self, id: str, *, read_timeout: Optional[float] = 60.0, duration: Optional[float] = None
    ) -> "EventStream":
        """An event query's notifications: an iterator of :class:`QueryEvent` (and
        :class:`Lagged`). Timeouts and closing as for :meth:`events`."""
        return self._stream("/v1/events", {"query": id}, read_timeout, duration)

    # -- HTTP ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Optional[Any]) -> Any:
        """A request with a JSON body (or none); its JSON answer."""
        target = self._url(path, {})
        full = self._full(target)
        data = None if body is None else json.dumps(body).encode()
        conn, _, resp = self._open(target, "application/json", self.timeout, method=method, body=data)
        try:
            raw = _read_all(resp, full)
        finally:
            conn.close()
        if resp.status >= 300:
            raise _api_error(resp, raw, full)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ProtocolError(f"{path}: the answer is not JSON ({e}): {raw[:200]!r}") from None

    def _stream(
        self, path: str, params: Mapping[str, str], read_timeout: Optional[float], duration: Optional[float]
    ) -> "EventStream":
        target = self._url(path, params)
        url = self._full(target)
        conn, sock, resp = self._open(target, "text/event-stream", self.timeout)
        try:
            if resp.status != 200:
                body = _read_all(resp, url)
                raise _api_error(resp, body, url)
            ctype = resp.getheader("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise ProtocolError(f"{url}: expected text/event-stream, got {ctype!r}")
        except BaseException:
            conn.close()
            raise
        return EventStream(conn, sock, resp, url, read_timeout=read_timeout, duration=duration)

    def _url(self, path: str, params: Mapping[str, str]) -> str:
        q = urllib.parse.urlencode(params)
        return self._prefix + path + ("?" + q if q else "")

    def _full(self, target: str) -> str:
        return f"{self._scheme}://{self._netloc}{target}"

    def _open(
        self,
        target: str,
        accept: str,
        timeout: float,
        *,
        method: str = "GET",
        body: Optional[bytes] = None,
    ) -> Tuple[http.client.HTTPConnection, socket.socket, http.client.HTTPResponse]:
        """Connect, send the request, read the status and headers."""
        full = self._full(target)
        conn: http.client.HTTPConnection
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except socket.timeout:
            conn.close()
            raise AgentUnreachable(self.base_url, f"connect timed out after {timeout} s") from None
        except OSError as e:
            conn.close()
            raise AgentUnreachable(self.base_url, _why(e)) from None
        sock = conn.sock
        assert sock is not None
        headers = {
            "Accept": accept,
            "User-Agent": f"mgrp-client-python/{__version__}",
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except socket.timeout:
            conn.close()
            raise RequestTimeout(full, timeout) from None
        except http.client.RemoteDisconnected as e:
            conn.close()
            raise AgentUnreachable(self.base_url, f"the agent closed the connection without answering ({e})") from None
        except OSError as e:
            conn.close()
            raise AgentUnreachable(self.base_url, f"connection lost: {_why(e)}") from None
        except http.client.HTTPException as e:
            conn.close()
            raise ProtocolError(f"{full}: not an HTTP answer: {e!r}") from None
        return conn, sock, resp

    def _get(
        self, path: str, params: Mapping[str, str], accept: str = "application/json", timeout: Optional[float] = None
    ) -> Tuple[http.client.HTTPResponse, bytes]:
        url = self._url(path, params)
        conn, _, resp = self._open(url, accept, self.timeout if timeout is None else timeout)
        try:
            body = _read_all(resp, self._full(url))
        finally:
            conn.close()
        if resp.status >= 300:
            raise _api_error(resp, body, self._full(url))
        return resp, body

    def _json(self, path: str, params: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> Any:
        _, body = self._get(path, params or {}, timeout=timeout)
        try:
            return json.loads(body)
        except ValueError as e:
            raise ProtocolError(f"{path}: the answer is not JSON ({e}): {body[:200]!r}") from None


def _why(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _target(path: Optional[str], peer: Optional[str], metric: str) -> Dict[str, str]:
    # The agent checks that exactly one of path / peer is given, and says so if not.
    p: Dict[str, str] = {}
    if path is not None:
        p["path"] = path
    if peer is not None:
        p["peer"] = peer
    if metric is not None:
        p["metric"] = metric
    return p


def _array(v: Any, what: str) -> List[Any]:
    if not isinstance(v, list):
        raise ProtocolError(f"{what}: expected a JSON array, got {type(v).__name__}")
    return v


def _read_all(resp: http.client.HTTPResponse, url: str) -> bytes:
    try:
        return resp.read()
    except socket.timeout:
        raise RequestTimeout(url, None) from None
    except http.client.IncompleteRead as e:
        raise AgentUnreachable(url, f"the answer was cut off ({e})") from None
    except OSError as e:
        raise AgentUnreachable(url, f"connection lost: {_why(e)}") from None


def _api_error(resp: http.client.HTTPResponse, body: bytes, url: str) -> ApiError:
    msg: Optional[str] = None
    try:
        v = json.loads(body)
        if isinstance(v, dict) and isinstance(v.get("error"), str):
            msg = v["error"]
    except ValueError:
        pass
    if msg is None:
        text = body.decode("utf-8", errors="replace").strip()
        msg = text[:500] if text else (resp.reason or "no reason given")
    return ApiError(resp.status, msg, url)


class EventStream(Iterator[EventItem]):
    """The events of one subscription, as they come (see :meth:`Client.events`).

    Iterate it; close it (or leave a ``with`` block) to close the connection, also from
    another thread to stop a blocked iteration. The iteration ends when the agent closes the
    stream, when ``duration`` has passed, or when the stream is closed.
    """

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        sock: socket.socket,
        resp: http.client.HTTPResponse,
        url: str,
        read_timeout: Optional[float] = 60.0,
        duration: Optional[float] = None,
    ) -> None:
        self._conn = conn
        self._sock = sock
        self._resp = resp
        self.url = url
        self.read_timeout = read_timeout
        self._deadline = None if duration is None else time.monotonic() + duration
        self._parser = SSEParser()
        self._pending: Deque[EventItem] = collections.deque()
        self._closed = False
        self._reading = False
        self._lock = threading.Lock()
        #: ``time.monotonic()`` of the last bytes received (keep-alives included).
        self.last_activity = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def keepalives(self) -> int:
        """Comment lines received so far (the agent's keep-alives)."""
        return self._parser.comments

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> EventItem:
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._closed:
                raise StopIteration
            chunk = self._read()
            if not chunk:
                self.close()
                raise StopIteration
            self.last_activity = time.monotonic()
            for m in self._parser.feed(chunk):
                self._pending.append(self._convert(m))

    def _read(self) -> bytes:
        timeout = self.read_timeout
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                return b""
            timeout = left if timeout is None else min(timeout, left)
        with self._lock:
            if self._closed:
                return b""
            self._reading = True
        try:
            self._sock.settimeout(timeout)
            return self._resp.read1(65536)
        except socket.timeout:
            if self._closed or (self._deadline is not None and time.monotonic() >= self._deadline - 0.001):
                return b""
            self.close()
            raise RequestTimeout(self.url, self.read_timeout) from None
        except (OSError, ValueError, http.client.HTTPException) as e:
            if self._closed:  # closed by another thread while reading
                return b""
            self.close()
            if isinstance(e, OSError):
                raise AgentUnreachable(self.url, f"event stream broken: {_why(e)}") from None
            raise AgentUnreachable(self.url, f"event stream broken: {e!r}") from None
        finally:
            with self._lock:
                self._reading = False
                if self._closed:
                    self._release()

    def _convert(self, m: SSEMessage) -> EventItem:
        try:
            data = json.loads(m.data) if m.data else None
        except ValueError:
            if m.event == "lagged":
                return Lagged(missed=None)
            self.close()
            raise ProtocolError(f"{self.url}: event {m.event!r} carries no JSON: {m.data[:200]!r}") from None
        if m.event == "lagged":
            return Lagged.from_json(data)
        try:
            if m.event == "query":
                return QueryEvent.from_json(data)
            return Event.from_json(data, kind=None if m.event == "message" else m.event)
        except MgrpError:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (idempotent). Safe from another thread: a blocked iteration
        then ends (the reading thread releases the connection)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if not self._reading:
                self._release()

    def _release(self) -> None:
        for c in (self._resp, self._conn):
            try:
                c.close()
            except Exception:
                pass

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
