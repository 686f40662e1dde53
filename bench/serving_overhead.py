"""What the limits of `app.serving` cost: the same trivial FastAPI route served by plain
uvicorn (httptools, as before these limits) and by `app.serving.build_server` (httptools
with the byte-level limits), driven by `wrk` in the same run.

    .venv/bin/python bench/serving_overhead.py [--connections 16 50] [--duration 8]

Prints requests/s, p50 and p99 per stack and connection count, and the ratio of the limited
stack's requests/s to plain uvicorn's. The load generator shares the cores with the server:
compare the ratio, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.support.processes import free_port, stop, wait_http  # noqa: E402

SERVER = textwrap.dedent(
    """
    import socket, sys
    import uvicorn
    from fastapi import FastAPI
    from app.serving import build_server
    from sharing.config import LimitsConfig

    app = FastAPI()
    ITEMS = {"items": [{"name": "share"}]}

    @app.get("/items")
    async def items():
        return ITEMS

    port, stack = int(sys.argv[1]), sys.argv[2]
    options = dict(log_config=None, access_log=False, host="127.0.0.1", port=port)
    if stack == "plain":
        uvicorn.Server(uvicorn.Config(app, http="httptools", **options)).run()
    else:
        build_server(app, LimitsConfig(), host="127.0.0.1", port=port).run()
    """
)

WRK_SCRIPT = """
done = function(summary, latency, requests)
  io.write(string.format('{"requests": %d, "seconds": %.6f, "p50": %d, "p99": %d}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50),
    latency:percentile(99)))
end
"""


def measure(stack: str, connections: int, seconds: float, work: Path) -> dict[str, float]:
    port = free_port()
    script = work / "server.py"
    script.write_text(SERVER)
    process = subprocess.Popen(
        [sys.executable, str(script), str(port), stack],
        cwd=HERE.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/items", process)
        lua = work / "report.lua"
        lua.write_text(WRK_SCRIPT)
        out = subprocess.run(
            [
                "wrk",
                "-t2",
                f"-c{connections}",
                f"-d{int(seconds)}s",
                "-s",
                str(lua),
                f"http://127.0.0.1:{port}/items",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        return {
            "rps": result["requests"] / result["seconds"],
            "p50": result["p50"] / 1000,
            "p99": result["p99"] / 1000,
        }
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 50])
    parser.add_argument("--duration", type=float, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"{'stack':<28}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'ratio':>8}")
        for connections in args.connections:
            plain = measure("plain", connections, args.duration, work)
            limited = measure("limited", connections, args.duration, work)
            for name, result in (("uvicorn httptools (before)", plain), ("app.serving", limited)):
                ratio = result["rps"] / plain["rps"]
                print(
                    f"{name:<28}{connections:>6}{result['rps']:>10.0f}{result['p50']:>9.2f}"
                    f"{result['p99']:>9.2f}{ratio:>8.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
