"""GET /console: a web console for search, compare, documents, models and jobs.

The server renders page shells only: settings a page needs (limits, defaults, whether a key is
required) and never any data. Each page's script fetches its data from the public and admin
HTTP endpoints with the keys the user entered, which stay in the tab's sessionStorage. While
RANKSERVE_ADMIN_TOKEN is unset, the Models and Jobs pages say how to enable them and load no
script at all. Assets ship inside this package and are served by exact file name, so no
request path reaches the filesystem; nothing is fetched from another origin (the CSP says so).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from core.jobs import DEFAULT_RECIPE
from core.settings import Settings
from models.training.config import Recipe
from models.training.methods import Method
from service.errors import NotFoundError
from service.routes.explain_schemas import DEFAULT_EXPLAIN_ANCHORS, MAX_EXPLAIN_ANCHORS

UPLOAD_BATCH = 64
_PACKAGE = Path(__file__).parent
_MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
ASSETS = {
    path.name: path
    for path in sorted((_PACKAGE / "static").iterdir())
    if path.suffix in _MEDIA_TYPES
}
# Scripts, styles and images from this origin only, no inline code, API calls to this origin;
# blob: images are the diagnostics charts, fetched with the admin token.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Page:
    name: str  # its path under /console, its template and its script
    title: str
    admin: bool  # needs the admin API


PAGES = (
    Page("search", "Search", admin=False),
    Page("compare", "Compare", admin=False),
    Page("documents", "Documents", admin=False),
    Page("models", "Models", admin=True),
    Page("jobs", "Jobs", admin=True),
)

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_PACKAGE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _context(settings: Settings) -> dict[str, Any]:
    """What the page shells show: limits and defaults, never a secret and never data."""
    return {
        "pages": PAGES,
        "api_key_required": settings.api_key is not None,
        "admin_enabled": settings.admin_token is not None,
        "lambda_inf": settings.lambda_inf,
        "max_top_k": settings.max_top_k,
        "max_text_chars": settings.max_text_chars,
        # Batches small enough that a JSONL upload's progress moves, within the API's limit.
        "upload_batch": min(UPLOAD_BATCH, settings.max_documents_per_request),
        "explain_anchors": DEFAULT_EXPLAIN_ANCHORS,
        "max_explain_anchors": MAX_EXPLAIN_ANCHORS,
        "methods": [method.value for method in Method],
        "recipes": [recipe.value for recipe in Recipe],
        "default_recipe": DEFAULT_RECIPE,
    }


def build_router(settings: Settings) -> APIRouter:
    # Pages are for people, not API clients: left out of the OpenAPI document.
    router = APIRouter(include_in_schema=False)
    context = _context(settings)

    @router.get("/console")
    def console() -> RedirectResponse:
        # Relative, so that the console also works behind a proxy that adds a path prefix.
        return RedirectResponse("console/search", status_code=307)

    def add_page(page: Page) -> None:
        html = _templates.get_template(f"{page.name}.html").render(context, page=page)

        @router.get(f"/console/{page.name}", name=f"console_{page.name}")
        def show() -> HTMLResponse:
            return HTMLResponse(html, headers=SECURITY_HEADERS)

    for page in PAGES:
        add_page(page)

    @router.get("/console/static/{name}")
    def asset(name: str) -> FileResponse:
        path = ASSETS.get(name)
        if path is None:
            raise NotFoundError(f"no console asset {name!r}")
        return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers=SECURITY_HEADERS)

    return router
