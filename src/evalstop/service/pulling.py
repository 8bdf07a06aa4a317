"""Where ``app.py`` and ``cli.py`` find pull ingest until they move (pull ingest lives in
:mod:`evalstop.service.pull`: ``pull/serve.py`` runs it inside ``evalstop serve``)."""

from __future__ import annotations

from .pull.serve import PullConfigError, PullLoop, default_cursor_dir, load_pull_config

__all__ = ["PullConfigError", "PullLoop", "default_cursor_dir", "load_pull_config"]
