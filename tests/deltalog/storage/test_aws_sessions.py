"""Sessions sharing one botocore data loader (deltalog.storage.aws_sessions): what a further
S3 storage costs in memory, and that credentials stay each session's own.

The memory cases run in a fresh interpreter (this one has parsed botocore's models in
other tests already) and read its resident set from /proc. Making a client goes over no
network, so no S3 endpoint is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deltalog.storage import aws_sessions
from deltalog.storage.s3 import S3Storage
from tests.support import REPO_ROOT

ENDPOINT = "http://127.0.0.1:9"  # never contacted: making clients sends nothing

_STORAGES = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    def rss_mib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    from deltalog.storage.s3 import S3Storage

    def options(i):
        opts = {{
            "endpoint_url": "{endpoint}",
            "region": "us-east-1",
            "access_key_id": f"key-{{i}}",
            "secret_access_key": "secret",
            "path_style": True,
        }}
        if i % 2:
            opts["role_arn"] = f"arn:aws:iam::123456789012:role/r{{i}}"
        return opts

    {warm}
    start = rss_mib()
    kept = [S3Storage(options(0))]
    first = rss_mib()
    kept += [S3Storage(options(i)) for i in range(1, int(sys.argv[1]) + 1)]
    print(json.dumps({{"first": first - start, "further": rss_mib() - first}}))
    """
)


def storage_growth(count: int, before: str = "") -> dict[str, float]:
    """RSS growth (MiB) of a fresh interpreter, after running `before`, for its first S3
    storage, and for `count` more with options of their own (odd ones assume a role: two
    sessions each)."""
    script = _STORAGES.format(endpoint=ENDPOINT, warm=before)
    out = subprocess.run(
        [sys.executable, "-c", script, str(count)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_further_storages_do_not_parse_the_models_again() -> None:
    """Each storage used to parse S3's model, endpoints and partitions for itself (about
    12 MiB each: 8 more storages grew the process by over 100 MiB); with one loader they
    cost about a megabyte each."""
    growth = storage_growth(8)
    assert growth["first"] > 5, growth  # the parse itself happens once, here
    assert growth["further"] < 24, growth


def test_sessions_share_the_loader_but_not_the_credentials() -> None:
    a = S3Storage({"endpoint_url": ENDPOINT, "access_key_id": "a", "secret_access_key": "x"})
    b = S3Storage({"endpoint_url": ENDPOINT, "access_key_id": "b", "secret_access_key": "y"})
    role = S3Storage(
        {
            "endpoint_url": ENDPOINT,
            "access_key_id": "c",
            "secret_access_key": "z",
            "role_arn": "arn:aws:iam::123456789012:role/r",
        }
    )
    loaders = {
        id(s._session.get_component("data_loader"))
        for s in (a.session, b.session, role.session, role.base_session)
    }
    assert len(loaders) == 1
    assert a.session is a.base_session
    assert a.credentials().access_key == "a"
    assert b.credentials().access_key == "b"
    assert role.base_session.get_credentials().access_key == "c"
    assert role.credentials().method == "assume-role"  # deferred: nothing fetched yet
    # boto3 appends its data directory to a session's loader: once, not once a session
    paths = role.session._session.get_component("data_loader").search_paths
    assert len(paths) == len(set(paths))


def test_a_data_path_gets_its_own_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`AWS_DATA_PATH` (or a profile's `data_path`) is honoured as botocore does: extra
    model directories searched before the built-in ones."""
    default = aws_sessions.new_session(region_name="us-east-1")
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    custom = aws_sessions.new_session(region_name="us-east-1")
    loader = custom._session.get_component("data_loader")
    assert loader is not default._session.get_component("data_loader")
    assert loader.search_paths[0] == str(tmp_path)
    assert loader is aws_sessions.new_session()._session.get_component("data_loader")


def test_a_missing_profile_is_refused_as_boto3_refuses_it() -> None:
    from botocore.exceptions import ProfileNotFound

    with pytest.raises(ProfileNotFound):
        aws_sessions.new_session(profile_name="lakeshare-no-such-profile")
