"""CPU per signed file URL verification (`FileServer.open`: the check behind every `/files`
request of a local table), for a recipient of the store and for the configured token.

    .venv/bin/python bench/url_verify.py [--calls 20000] [--compare DIR]

A server is built in-process (`create_app`, SQLite store, `store.cacheSeconds` 2 as by
default) over the DAT table `basic_partitioned`; one query per holder gives a file URL,
then the URL's parameters are verified `--calls` times by the app's own FileServer (the
signature, the holder's current state from the recipient directory's cache, the path on
disk: what the route does before it opens the file). Thread CPU time, not wall time: the
figure does not move with the machine's load. `--compare DIR` runs the same measurement on
the code checked out at DIR (e.g. `git archive` of an earlier commit) in a subprocess and
prints both and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

HERE = Path(__file__).resolve().parent
TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"
TABLE = "levi/dat/basic_partitioned/delta"
ROUNDS = 5
_CODE = "URL_VERIFY_CODE"  # the checkout a compared run imports lakeshare from


def _setup(workdir: Path) -> tuple[Path, str]:
    """The configuration file and a store recipient's bearer token."""
    from app.cli import main as cli
    from tests.support.corpus import corpus_table

    table = workdir / "t"
    shutil.copytree(corpus_table(TABLE), table)
    config = workdir / "config.yaml"
    document = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": SECRET,
        "store": {"url": f"sqlite:///{workdir / 'store.db'}", "cacheSeconds": 2},
        "shares": [
            {
                "name": "share",
                "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(table)}]}],
            }
        ],
    }
    config.write_text(yaml.safe_dump(document))
    out = workdir / "bench.share"
    args = ["recipients", "create", "bench", "--share", "share", "--config", str(config)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli([*args, "--profile-out", str(out), "--endpoint", "http://x/"]) == 0
    return config, json.loads(out.read_text())["bearerToken"]


def _measure(calls: int) -> dict[str, float]:
    """Microseconds of thread CPU per verification, best of ROUNDS, per holder."""
    from starlette.testclient import TestClient

    from app.main import create_app
    from sharing.config import load_config
    from sharing.presign.local_verify import url_holder

    workdir = Path(tempfile.mkdtemp(prefix="url-verify-"))
    try:
        config_file, store_token = _setup(workdir)
        app = create_app(load_config(config_file))
        results: dict[str, float] = {}
        with TestClient(app) as client:
            server = app.state.file_server
            for holder_name, token in (("store recipient", store_token), ("config token", TOKEN)):
                reply = client.post(
                    "/delta-sharing/shares/share/schemas/s/tables/t/query",
                    headers={"Authorization": f"Bearer {token}"},
                    json={},
                )
                assert reply.status_code == 200, reply.text
                url = next(
                    json.loads(line)["file"]["url"]
                    for line in reply.text.splitlines()
                    if '"file"' in line
                )
                parts = urlsplit(url)
                params = {k: v[0] for k, v in parse_qs(parts.query).items()}
                share, schema, table, path = (
                    unquote(parts.path).split("/files/", 1)[1].split("/", 3)
                )
                holder = url_holder(params.get("rcp"), params.get("cid"))
                exp, sig = params["exp"], params["sig"]

                def verify() -> None:
                    server.open(share, schema, table, path, exp, sig, holder)  # noqa: B023

                for _ in range(200):  # warm caches
                    verify()
                best = float("inf")
                for _ in range(ROUNDS):
                    start = time.thread_time()
                    for _ in range(calls):
                        verify()
                    best = min(best, (time.thread_time() - start) / calls)
                results[holder_name] = best * 1e6
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--compare", type=Path, default=None, help="also measure the code here")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.environ.get(_CODE, str(HERE.parent)))
    now = _measure(args.calls)
    if args.json:
        print(json.dumps(now))
        return
    print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"{'holder':<16} {'this code µs/verify':>20}", end="")
    other: dict[str, float] = {}
    if args.compare is not None:
        code = args.compare.resolve()
        env = dict(os.environ, PYTHONPATH=str(code), **{_CODE: str(code)})
        command = [sys.executable, str(code / "bench" / "url_verify.py")]
        if not (code / "bench" / "url_verify.py").exists():
            command = [sys.executable, "-c", _RUN_HERE.format(here=str(HERE))]
        done = subprocess.run(
            [*command, "--calls", str(args.calls), "--json"],
            env=env,
            cwd=code,
            capture_output=True,
            text=True,
            check=True,
        )
        other = json.loads(done.stdout.strip().splitlines()[-1])
        print(f" {'compared µs/verify':>19} {'ratio':>7}", end="")
    print()
    for holder, cost in now.items():
        line = f"{holder:<16} {cost:>20.2f}"
        if holder in other:
            line += f" {other[holder]:>19.2f} {cost / other[holder]:>7.3f}"
        print(line)


# The compared checkout may predate this script: run this file's measurement with the
# compared code first on the path (PYTHONPATH and the working directory).
_RUN_HERE = (
    "import sys, runpy; sys.path.insert(0, '.'); "
    "sys.argv = ['url_verify.py'] + sys.argv[1:]; "
    "runpy.run_path('{here}/url_verify.py', run_name='__main__')"
)


if __name__ == "__main__":
    main()
