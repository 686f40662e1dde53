"""A local Spark Connect server for tests: PySpark's own `start-connect-server.sh --wait`
(the server class ships in PySpark's jars) on `local[2]` and a free port of 127.0.0.1, in a
process group of its own so that stopping it stops its JVM and Python workers too.

Its Python workers run this interpreter (the venv with Lakeshare installed), as a
cluster's must have Lakeshare installed for the `deltalog` source and the copy job.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port
from tests.support.requirements import require


@dataclass(frozen=True)
class ConnectServer:
    url: str  # sc://127.0.0.1:PORT
    log: Path  # the server's output (Spark's driver log)

    def jobs_finished(self) -> int:
        """How many Spark jobs the server has finished so far (from its driver log)."""
        text = self.log.read_text(errors="replace")
        return sum(
            1 for line in text.splitlines() if "DAGScheduler: Job" in line and "finished" in line
        )


@contextmanager
def connect_server(workdir: Path) -> Iterator[ConnectServer]:
    require(shutil.which("java") is not None, "Java 17 (openjdk-17-jre-headless) for PySpark")
    import pyspark

    home = Path(pyspark.__file__).parent
    script = home / "sbin" / "start-connect-server.sh"
    require(script.exists(), "PySpark's start-connect-server.sh (pyspark[connect] >= 4)")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "connect-server.log"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(workdir),
        "SPARK_PID_DIR": str(workdir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    # The repository on the workers' path, as an installed Lakeshare would be.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")) if p
    )
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                "bash",
                str(script),
                "--wait",
                "--master",
                "local[2]",
                "--conf",
                f"spark.connect.grpc.binding.port={port}",
                "--conf",
                "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf",
                "spark.driver.bindAddress=127.0.0.1",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "--conf",
                "spark.sql.session.timeZone=UTC",
            ],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_port(port, process, log)
        yield ConnectServer(f"sc://127.0.0.1:{port}", log)
    finally:
        _stop_group(process)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited:\n{log.read_text()[-3000:]}")
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the Spark Connect server did not listen:\n{log.read_text()[-3000:]}")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (bash, its JVM, the Python workers), SIGKILL
    when it is still there 20 s later."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
