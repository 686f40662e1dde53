"""Errors as Spark shows them: the server's `errorCode: message`, not a worker traceback.

Spark prints the Python traceback of an exception raised in a data source. For errors the
user can act on (a missing table, a revoked token, a feature this client cannot read, a
bad option) the frames inside this package say nothing useful, so the entry points Spark
calls re-raise them with the traceback cut to the entry point itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from client.errors import DeltaSharingError

F = TypeVar("F", bound=Callable[..., Any])


def surfaced(method: F) -> F:
    """Re-raise this package's errors from `method` without the inner frames."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except DeltaSharingError as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]


def surfaced_iterator(method: F) -> F:
    """`surfaced` for a method that returns an iterator (errors raised while iterating)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            yield from method(*args, **kwargs)
        except DeltaSharingError as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]
