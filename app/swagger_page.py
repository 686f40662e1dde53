"""A browsable Swagger UI page for an app's OpenAPI description, that works offline.

FastAPI's own `/docs` page loads Swagger UI's script and styles from a CDN: on a server
with no internet access (or a browser behind a strict proxy) it stays blank. Here the page
is FastAPI's, but its assets are the copies the installed `fastapi-offline` package ships,
served by the app itself under `{docs path}-assets/`, and Swagger UI's online validator
(an image fetched from swagger.io) is off: the page makes no request outside the server.
The page and its assets carry no secret and are served without authentication; the calls
made from the page authenticate as the OpenAPI's security schemes say.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

__all__ = ["ASSETS", "install_swagger_page"]

ASSETS = Path(fastapi_offline.__file__).parent / "static"
"""swagger-ui-bundle.js, swagger-ui.css and favicon.png, as the package ships them."""


def install_swagger_page(app: FastAPI, path: str = "/docs") -> None:
    """Serve the page at `path` of `app` (whose `openapi_url` it shows) and its assets."""
    if app.openapi_url is None:
        raise ValueError("the app publishes no OpenAPI description to show")
    openapi_url = app.openapi_url
    assets = f"{path}-assets"
    app.mount(assets, StaticFiles(directory=ASSETS), name="swagger-assets")

    async def swagger_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")  # where the app is mounted
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{assets}/swagger-ui.css",
            swagger_favicon_url=f"{root}{assets}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    app.add_route(path, swagger_page, include_in_schema=False)
