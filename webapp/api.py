"""The project API: mounts each app's router. OpenAPI at /api/docs."""
from ninja import NinjaAPI

from investigations.api_auth import session_auth, user_token_auth

# A personal API token (Bearer) first, so a script never meets the session's CSRF check;
# without an Authorization header, the browser session (with CSRF) decides.
api = NinjaAPI(title="Precursor API", version="1", auth=[user_token_auth, session_auth], urls_namespace="api")

# Routers are added by their apps; each module stays importable on its own.
from investigations.api import router as investigations_router  # noqa: E402

api.add_router("/", investigations_router)
from investigations.ingest_api import router as ingest_router  # noqa: E402

api.add_router("/ingest", ingest_router)
from investigations.workspace_api import router as workspace_router  # noqa: E402

api.add_router("/", workspace_router)
from investigations.case_view_api import router as case_view_router  # noqa: E402

api.add_router("/", case_view_router)
from investigations.catalog_api import router as catalog_router  # noqa: E402

api.add_router("/", catalog_router)
