"""Authentication of the workspace API: a person's ``api`` token, or the browser session.

Scripts and notebooks send ``Authorization: Bearer prc_…`` with a token of scope ``api``
(made on /account/tokens or with ``create_token --scope api --user NAME``). The request then
runs as the token's owner, with the owner's current role, and needs no CSRF token (a browser
never attaches this header by itself). Without the header, the session cookie is used and
CSRF holds as for any form. A Bearer header that is not a live ``api`` token is a 401, never
a silent fall-back to the session; other schemes (Basic from an authenticating proxy in front
of Precursor) are left to the session.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth

from investigations import tokens


class UserTokenAuth(HttpBearer):
    def __call__(self, request: HttpRequest):
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            # Not ours (no header, or e.g. Basic from a proxy in front): the session decides.
            return None
        if not value.strip():
            raise HttpError(401, "the Authorization header must be 'Bearer <token>' with a workspace API token")
        return self.authenticate(request, value.strip())

    def authenticate(self, request: HttpRequest, token: str):
        found = tokens.authenticate(token, scope="api")
        if found is None:
            raise HttpError(401, "unknown, revoked or non-API token (ingest tokens only work on /api/ingest/*), "
                                 "or its owner is deactivated; make one on /account/tokens")
        request.user = found.created_by
        request.api_token = found
        return found.created_by


user_token_auth = UserTokenAuth()


class LoggedInSession(SessionAuth):
    """The browser session, with CSRF, for logged-in people only: an anonymous request is a
    401 (not logged in), not the 403 "CSRF check Failed" the CSRF check would answer first."""

    def __call__(self, request: HttpRequest):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        return super().__call__(request)


session_auth = LoggedInSession()
