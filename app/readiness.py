"""Readiness (`/readyz`): whether this process should be sent traffic now.

Distinct from liveness (`/healthz`, "the process answers"): ready means the configuration
is loaded, the app has started (its lifespan ran), and every named check passes. Checks
are small callables that raise when the state they stand for is unreachable (the
async-query store, the signing setup); other parts of the server may `add` their own (a
database state store). Tables are deliberately not checked: one slow or broken bucket
must not take every replica out of the load balancer; `lakeshare check` reports tables.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

__all__ = ["OK", "Readiness"]

log = logging.getLogger("lakeshare.server")

OK = "ok"
Check = Callable[[], object]


class Readiness:
    """Named checks run on each probe, each in a worker thread with a time limit."""

    def __init__(self, timeout_seconds: float = 2.0) -> None:
        self.timeout_seconds = timeout_seconds
        self.started = False
        self._checks: dict[str, Check] = {}
        self._details: dict[str, Callable[[], str]] = {}

    def add(self, name: str, check: Check) -> None:
        """`check()` raises (or times out) when `name` is not ready."""
        self._checks[name] = check

    def add_detail(self, name: str, describe: Callable[[], str]) -> None:
        """`describe()` is shown under `details` in every answer without deciding
        readiness (e.g. a failed configuration reload: the previous one still serves)."""
        self._details[name] = describe

    def details(self) -> dict[str, str]:
        return {name: describe() for name, describe in self._details.items()}

    async def report(self) -> tuple[bool, dict[str, str]]:
        """(ready, check name -> `ok` or a short reason). Reasons name no secret and no
        internal detail; the detail is logged."""
        results = {"configuration": OK, "started": OK if self.started else "starting"}
        for name, check in self._checks.items():
            try:
                await asyncio.wait_for(run_in_threadpool(check), self.timeout_seconds)
            except TimeoutError:
                log.warning("readiness check %s timed out after %ss", name, self.timeout_seconds)
                results[name] = "timeout"
            except Exception as exc:
                log.warning("readiness check %s failed: %s", name, exc)
                results[name] = "failed"
            else:
                results[name] = OK
        return all(value == OK for value in results.values()), results
