"""Security headers and login throttling glue.

- ``ContentSecurityPolicy`` middleware: every HTML answer carries the policy in
  ``settings.CONTENT_SECURITY_POLICY``: scripts, styles, images, fonts and
  connections from our own origin only (plotly.js and Swagger UI are served from
  our static files), no plugins, no framing, forms post only to us. plotly.js
  writes inline styles (its own stylesheet and element styles), hence
  ``style-src 'unsafe-inline'``; no inline or third-party *script* runs.
  One exception, one page: the case overlay draws with WebGL (``scattergl``),
  whose engine (regl, inside plotly.js) compiles its draw calls with
  ``Function()``; views decorated with ``allows_eval`` (the case page) add
  ``'unsafe-eval'`` to ``script-src``. Still no inline script runs there.
- ``locked_out``: the answer to a login attempt while django-axes holds the
  account locked: a page saying why and for how long, HTTP 429.
"""
from __future__ import annotations

import functools

from django.conf import settings
from django.shortcuts import render


def content_security_policy(directives: dict[str, str]) -> str:
    return "; ".join(f"{name} {value}".strip() for name, value in directives.items())


CSP_DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",  # plotly.js styles its elements inline
    "img-src": "'self' data: blob:",  # plotly's toImage and Swagger UI's icons
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "worker-src": "'self' blob:",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def allows_eval(view):
    """Mark a view whose page runs plotly's WebGL traces (see the module docstring)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response.csp_allows_eval = True
        return response

    return wrapped


class ContentSecurityPolicy:
    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = content_security_policy(CSP_DIRECTIVES)
        self.policy_eval = content_security_policy({**CSP_DIRECTIVES, "script-src": "'self' 'unsafe-eval'"})

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            allow = getattr(response, "csp_allows_eval", False)
            response["Content-Security-Policy"] = self.policy_eval if allow else self.policy
        return response


def locked_out(request, original_response=None, credentials=None):
    """django-axes' AXES_LOCKOUT_CALLABLE: the page, status 429, and the time left."""
    from axes.helpers import get_cool_off

    cool_off = get_cool_off(request)
    minutes = int(cool_off.total_seconds() // 60) if cool_off else None
    return render(request, "registration/locked_out.html", {
        "failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": minutes,
    }, status=429)
