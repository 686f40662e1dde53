"""The page a person sees when they open the server's URL (or the endpoint URL from a
profile) in a browser: what this is, its version, the endpoint, and how to read it with a
profile file. JSON for `Accept: application/json`. It names no share or table: it is served
without a token."""

from __future__ import annotations

import html
from importlib import metadata
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from app.responses import JsonResponse

__all__ = ["router", "server_version"]

router = APIRouter()

PROTOCOL_URL = "https://github.com/delta-io/delta-sharing/blob/main/PROTOCOL.md"


def server_version() -> str:
    try:
        return metadata.version("lakeshare")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "unknown"


def _endpoint_url(request: Request) -> str:
    config = request.app.state.config
    base = config.public_url or str(request.base_url).rstrip("/")
    return f"{base}{config.endpoint}/"


def _summary(request: Request) -> dict[str, Any]:
    endpoint = _endpoint_url(request)
    return {
        "server": "Lakeshare",
        "description": "A Delta Sharing server: read its shared Delta tables with any Delta "
        "Sharing client, using the profile file your data provider gave you.",
        "version": server_version(),
        "protocol": "Delta Sharing",
        "endpoint": endpoint,
        "profileExample": {
            "shareCredentialsVersion": 1,
            "endpoint": endpoint,
            "bearerToken": "<token from your provider>",
        },
        "links": {"protocol": PROTOCOL_URL, "health": "/healthz", "readiness": "/readyz"},
    }


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _page(summary: dict[str, Any]) -> str:
    endpoint = html.escape(summary["endpoint"])
    version = html.escape(summary["version"])
    profile = html.escape(
        "{\n"
        '  "shareCredentialsVersion": 1,\n'
        f'  "endpoint": "{summary["endpoint"]}",\n'
        '  "bearerToken": "<token from your provider>"\n'
        "}",
        quote=False,
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Lakeshare — Delta Sharing server</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.5; color: #1d232b; }}
code, pre {{ background: #f2f4f7; border-radius: 4px; }}
pre {{ padding: .8rem; overflow-x: auto; }}
h1 small {{ font-weight: normal; color: #5b6673; font-size: .55em; }}
</style>
</head>
<body>
<h1>Lakeshare <small>version {version}</small></h1>
<p>This is a <a href="{PROTOCOL_URL}">Delta Sharing</a> server. Data providers share Delta
tables through it; recipients read them with any Delta Sharing client using the profile
file their provider gave them.</p>
<h2>Endpoint</h2>
<p id="endpoint"><code>{endpoint}</code></p>
<h2>How to read shared tables</h2>
<p>A profile file names this endpoint and your credential:</p>
<pre id="profile">{profile}</pre>
<p>With the Python client (<code>pip install delta-sharing</code>):</p>
<pre>import delta_sharing
profile = "config.share"
print(delta_sharing.SharingClient(profile).list_all_tables())
df = delta_sharing.load_as_pandas(profile + "#&lt;share&gt;.&lt;schema&gt;.&lt;table&gt;")</pre>
<p>With curl:</p>
<pre>curl -H "Authorization: Bearer &lt;token&gt;" {endpoint}shares</pre>
<p>Share and table names are listed only with a valid credential.</p>
</body>
</html>
"""


async def landing(request: Request) -> Response:
    summary = _summary(request)
    if _wants_json(request):
        return JsonResponse(summary)
    return HTMLResponse(_page(summary))


router.add_api_route("/", landing, methods=["GET"], include_in_schema=False)
