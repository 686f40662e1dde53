"""Temporary table credentials: cloud credentials limited to one table's directory.

`vending` dispatches on the table's storage kind to one module per cloud (`s3`, `azure`,
`gcs`), after `location` has checked what is asked for; `base` holds what they share.
"""

from sharing.credentials.base import CredentialsUnavailable, TemporaryCredentials
from sharing.credentials.location import OUTSIDE_TABLE, check_location, parse_location
from sharing.credentials.vending import (
    VendingSupport,
    require_history_for_credentials,
    vend,
    vending_support,
)

__all__ = [
    "OUTSIDE_TABLE",
    "CredentialsUnavailable",
    "TemporaryCredentials",
    "VendingSupport",
    "check_location",
    "parse_location",
    "require_history_for_credentials",
    "vend",
    "vending_support",
]
