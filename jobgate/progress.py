"""What ``jobgate run`` tells a person while a session waits and runs (all on stderr).

On a terminal, one live line is rewritten in place while the session waits::

    jobgate: PENDING 12s · 2 nodes lack 4 cpu

and cleared when the job's own output starts; when stderr is not a terminal the same
facts come as plain lines, one per change. The job's output (stdout, stderr) is never
mixed with these notes: the live line is gone before the first byte of it is written.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Any, TextIO

from jobgate.render import duration

__all__ = ["Progress"]

WAITING = frozenset({"PENDING", "SCHEDULED", "PREPARING"})
REFRESH_S = 0.25


class Progress:
    def __init__(self, session_id: str, *, quiet: bool = False, stream: TextIO | None = None):
        self.session_id = session_id
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and not quiet
        self.started = time.monotonic()
        self.status_now = ""
        self.reason = ""
        self.running_seen = False
        self.last_plain = ""
        self._lock = threading.RLock()  # say() may run in a signal handler
        self._live = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- events ---------------------------------------------------------------------
    def status(self, data: dict[str, Any]) -> None:
        status = str(data.get("status", ""))
        reason = str(data.get("pending_reason") or data.get("reason") or "")
        self.status_now, self.reason = status, reason
        if status in WAITING:
            self._waiting()
        elif status == "RUNNING":
            self._running()
        elif status == "TERMINATING":
            self.stop()
            self._note(f"jobgate: TERMINATING ({reason})" if reason else "jobgate: TERMINATING")
        elif status == "PREEMPTED":
            self.stop()
            self._note(f"jobgate: PREEMPTED ({reason}); it is queued again once it stopped")

    def note(self, message: str) -> None:
        """A progress message from the worker (pulling an image, ...)."""
        if self.running_seen:
            return
        # "pending: no node fits" while PENDING: the status is on the line already
        self.reason = message.removeprefix(f"{self.status_now.lower()}: ")
        self._waiting()

    def output_starts(self) -> None:
        """The job's first output: it runs, whether or not its RUNNING event came yet."""
        self._running()
        self.stop()

    def say(self, text: str) -> None:
        """One line of jobgate's own, above the live line if there is one."""
        with self._lock:
            if self._live:
                self.stream.write("\r\x1b[2K")
            self.stream.write(text + "\n")
            if self._live:
                self.stream.write(self._line())
            self.stream.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._live:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._live = False

    # -- helpers ----------------------------------------------------------------------
    def _running(self) -> None:
        if self.running_seen:
            return
        self.running_seen = True
        self.stop()
        self._note(f"jobgate: RUNNING after {duration(self.elapsed())} (session {self.short})")

    def _note(self, text: str) -> None:
        if not self.quiet:
            self.say(text)

    @property
    def short(self) -> str:
        return self.session_id[:8]

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _waiting(self) -> None:
        if self.quiet:
            return
        if not self.tty:
            line = f"jobgate: {self.status_now}" + (f" ({self.reason})" if self.reason else "")
            if line != self.last_plain:
                self.last_plain = line
                self.say(line)
            return
        with self._lock:  # at once, then every REFRESH_S (the elapsed time moves)
            self._live = True
            self.stream.write(self._line())
            self.stream.flush()
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._refresh, daemon=True)
            self._thread.start()

    def _line(self) -> str:
        text = f"jobgate: {self.status_now} {duration(self.elapsed())}"
        if self.reason:
            text += f" · {self.reason}"
        width = shutil.get_terminal_size((80, 24)).columns - 1
        return "\r\x1b[2K" + (text if len(text) <= width else text[: width - 1] + "…")

    def _refresh(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._live:
                    self.stream.write(self._line())
                    self.stream.flush()
            self._stop.wait(REFRESH_S)
