"""The operator console at ``/ui``: server-rendered pages (Jinja2) and SVG charts, one small
script of our own for live updates; nothing from a CDN, so it works air-gapped.

:func:`mount` adds it to an app made by :func:`evalstop.service.app.create_app`.
"""

from __future__ import annotations

from fastapi import FastAPI


def mount(app: FastAPI) -> None:
    """Serve the console on ``app`` (whose ``state.ctx`` is the running service)."""
    from .auth import ConsoleAuth
    from .views import router

    ctx = app.state.ctx
    app.state.console_auth = ConsoleAuth(ctx.settings, ctx.store, clock=ctx.store.clock)
    app.include_router(router)
