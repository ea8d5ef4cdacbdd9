"""A Server-Sent Events parser (the WHATWG "event stream interpretation"), sans I/O.

Feed it bytes as they arrive (in chunks of any size, split anywhere); it returns the complete
messages. Lines end in CRLF, LF or CR; a line starting with ``:`` is a comment (keep-alive);
``data:`` lines accumulate (joined by newlines); an empty line dispatches the message; a
message without data is dropped, as a browser's EventSource does; a message cut off by the end
of the stream is dropped too.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["SSEMessage", "SSEParser"]


@dataclass(frozen=True)
class SSEMessage:
    """One dispatched message: ``event`` is the event name (``message`` when none was given)."""

    event: str
    data: str
    id: Optional[str] = None
    retry: Optional[int] = None


class SSEParser:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._skip_lf = False  # the last chunk ended in CR: a leading LF is that CR's pair
        self._first = True  # a BOM may open the stream
        self._event = ""
        self._data: List[str] = []
        self._has_data = False
        self.last_event_id: Optional[str] = None
        self.retry: Optional[int] = None
        #: Comment lines seen (the agent sends one every 15 s as a keep-alive).
        self.comments = 0

    def feed(self, chunk: bytes) -> List[SSEMessage]:
        """Parse ``chunk``; return the messages it completes, in order."""
        text = self._decoder.decode(chunk)
        if self._first and text:
            self._first = False
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf and text:
            if text.startswith("\n"):
                text = text[1:]
            self._skip_lf = False
        self._buf += text
        out: List[SSEMessage] = []
        start = 0
        buf = self._buf
        n = len(buf)
        i = 0
        while i < n:
            c = buf[i]
            if c == "\n" or c == "\r":
                line = buf[start:i]
                if c == "\r":
                    if i + 1 < n:
                        if buf[i + 1] == "\n":
                            i += 1
                    else:
                        self._skip_lf = True
                start = i + 1
                m = self._line(line)
                if m is not None:
                    out.append(m)
            i += 1
        self._buf = buf[start:]
        return out

    def _line(self, line: str) -> Optional[SSEMessage]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isdigit():
                self.retry = int(value)
        # Other field names are ignored, as the standard says.
        return None

    def _dispatch(self) -> Optional[SSEMessage]:
        event, data, has = self._event, self._data, self._has_data
        self._event, self._data, self._has_data = "", [], False
        if not has:
            return None
        return SSEMessage(
            event=event or "message",
            data="\n".join(data),
            id=self.last_event_id,
            retry=self.retry,
        )
