"""``/docs`` without the internet: Swagger UI's assets are served by the service itself from
files vendored in this package (``service/static/vendor/swagger-ui``: ``swagger-ui-dist``
5.35.0 from npm, Apache-2.0, its licence beside it), not from a CDN, so the page works on an
offline or air-gapped host. Swagger UI 5 reads OpenAPI 3.1, the version this service serves
(4.x, the ``swagger-ui-bundle`` package's, refused it: "does not specify a valid version
field"). ReDoc (CDN-only) is off."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

ASSETS_PATH = "/docs/assets"
# the files the page loads: name -> media type
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}


def assets_dir() -> Path:
    """The folder of the vendored Swagger UI files."""
    return Path(__file__).parent / "static" / "vendor" / "swagger-ui"


def install_docs(app: FastAPI) -> None:
    """Add ``GET /docs`` and ``GET /docs/assets/{name}`` to ``app`` (created with
    ``docs_url=None``)."""

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + (app.openapi_url or "/openapi.json"),
            title=app.title + " - docs",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
        )

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    async def docs_asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, f"no docs asset {name!r}")
        body = (assets_dir() / name).read_bytes()
        return Response(body, media_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=86400"})
