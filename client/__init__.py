"""The recipient side of Delta Sharing: a protocol client and a PySpark data source.

`client.rest.SharingClient` speaks the REST protocol (profiles, paging, format negotiation,
retries, URL refresh); `client.files` turns the file actions it returns into Arrow record
batches; `client.spark` is the PySpark Python Data Source built on both (optional extra
`lakeshare[spark]`). Only `deltalog/` is imported from the server's packages.
"""

from client.errors import (
    DeltaSharingError,
    OptionError,
    ProfileError,
    SharingServerError,
    UnsupportedTableError,
)
from client.profile import Profile, TableRef, parse_table_url
from client.rest import SharingClient

__all__ = [
    "DeltaSharingError",
    "OptionError",
    "Profile",
    "ProfileError",
    "SharingClient",
    "SharingServerError",
    "TableRef",
    "UnsupportedTableError",
    "parse_table_url",
]
