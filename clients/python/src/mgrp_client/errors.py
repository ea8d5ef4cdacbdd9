"""Exceptions: everything the client raises on purpose derives from :class:`MgrpError`."""

from __future__ import annotations

from typing import Optional


class MgrpError(Exception):
    """Base class of the client's errors."""


class AgentUnreachable(MgrpError):
    """No connection to the agent: refused, no route, name unknown, connect timeout, or the
    connection dropped before an answer came.

    ``url`` is what was asked for and ``reason`` the underlying OS error (a string).
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach the mgrp agent at {url}: {reason} (is `mgrp agent --config` running with `http` set?)")


class RequestTimeout(MgrpError, TimeoutError):
    """The agent accepted the connection but did not answer (or, on an event stream, sent
    nothing at all, not even a keep-alive) within the timeout."""

    def __init__(self, url: str, timeout: Optional[float]) -> None:
        self.url = url
        self.timeout = timeout
        super().__init__(f"no answer from the mgrp agent within {timeout} s: {url}")


class ApiError(MgrpError):
    """The agent answered with an error status. ``message`` is the agent's own reason
    (the ``error`` of its ``{"error": ...}`` body); ``status`` the HTTP status: 400 bad
    parameter, 401 token, 404 unknown path or endpoint, 409 cannot measure on demand,
    500 store, 504 an on-demand measurement did not finish in time."""

    def __init__(self, status: int, message: str, url: str = "") -> None:
        self.status = status
        self.message = message
        self.url = url
        super().__init__(f"HTTP {status}: {message}")


class ProtocolError(MgrpError):
    """The agent's answer is not what the API promises (not JSON, a field missing or of the
    wrong type)."""
