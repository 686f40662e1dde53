"""deltalog is a library about Delta tables: importing all of it (events hook included)
loads nothing of the server (sharing, app), of HTTP frameworks or of metrics libraries."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import REPO_ROOT

_FORBIDDEN = ("sharing", "app", "fastapi", "starlette", "uvicorn", "prometheus_client", "httpx")

_PROBE = """
import json, pkgutil, importlib, sys
import deltalog
for module in pkgutil.walk_packages(deltalog.__path__, "deltalog."):
    importlib.import_module(module.name)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_deltalog_imports_no_server_code() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=REPO_ROOT, check=True, capture_output=True, text=True
    ).stdout
    loaded = set(json.loads(out))
    assert "deltalog" in loaded
    assert not loaded & set(_FORBIDDEN)
