"""boto3 sessions that share one botocore data loader per process.

A botocore session has its own data loader, and a session's first client parses its
service's model, endpoint rules and partitions from botocore's JSON files into Python
objects: about 12 MiB for S3, in every session, kept as long as the session's clients
live. The server makes a session per distinct set of S3 storage options (and one more for
a table that assumes a role), so each of them paid it again, in every worker. The parsed
documents are read-only data, the same for every session (botocore already shares them
between the clients of one session), so all sessions made here share one loader: a
further session and client cost about 1 MiB. Everything about credentials stays per
session: profile, keys, region, environment and the default chain.

`warm` parses what the server's S3 storages and credential vending use, in the
supervisor before it forks its workers, so the workers start with those documents as
shared pages.
"""

from __future__ import annotations

import os
import threading

import boto3
import botocore.session
from botocore.loaders import Loader

__all__ = ["new_core_session", "new_session", "warm"]

WARM_SERVICES = ("s3", "sts")
"""The services whose models `warm` loads: the storage's and credential vending's."""


class _SearchPaths(list[str]):
    """A loader's search paths; an append of a path already there is dropped (boto3 appends
    its own data directory to its session's loader each time a session is made)."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


_LOADERS: dict[str | None, Loader] = {}
_LOCK = threading.Lock()


def _shared_loader(data_path: str | None) -> Loader:
    """The process's loader for a `data_path` setting (`AWS_DATA_PATH` or a profile's
    `data_path`: one loader per distinct value, as botocore would build it)."""
    with _LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            paths = (
                [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)]
                if data_path is not None
                else []
            )
            loader = _LOADERS[data_path] = Loader(extra_search_paths=_SearchPaths(paths))
        return loader


def new_core_session(profile: str | None = None) -> botocore.session.Session:
    """A botocore session for `profile` (None: the default), with the shared loader."""
    core = botocore.session.Session(profile=profile)
    core.register_component("data_loader", _shared_loader(core.get_config_variable("data_path")))
    return core


def new_session(
    *,
    profile_name: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    region_name: str | None = None,
) -> boto3.Session:
    """`boto3.Session(...)` with these arguments, its loader the shared one."""
    return boto3.Session(
        botocore_session=new_core_session(profile_name),
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        region_name=region_name,
    )


def warm() -> None:
    """Parses the models of `WARM_SERVICES` (with their endpoint rules and partitions)
    into the shared loader. The clients get placeholder keys, so no credential is looked up
    and nothing goes over the network."""
    session = new_session(
        aws_access_key_id="warm", aws_secret_access_key="warm", region_name="us-east-1"
    )
    for service in WARM_SERVICES:
        session.client(service)
