"""Optional dependencies: which extra installs a module, and the one line to print when it is missing.

evalstop is installed from a clone (it is not published on PyPI), so the command is the editable
form run in the checkout: ``pip install -e '.[service]'``.
"""

from __future__ import annotations

#: top-level module -> the extra of pyproject.toml that installs it.
EXTRA_OF_MODULE = {
    "matplotlib": "plot",
    "ray": "ray",
    "uvicorn": "service", "fastapi": "service", "sqlalchemy": "service", "psycopg": "service",
    "prometheus_client": "service", "httpx": "service", "pydantic_settings": "service",
    "pydantic": "service", "starlette": "service",
    "mlflow": "pull", "tensorboard": "pull",
    "torch": "hf", "transformers": "hf", "trl": "hf", "accelerate": "hf", "datasets": "hf",
    "optuna": "optuna",
}


def install_command(extra: str) -> str:
    """The command that installs ``extra`` from the evalstop checkout."""
    return f"pip install -e '.[{extra}]'"


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is fine), or None if evalstop has none."""
    return EXTRA_OF_MODULE.get((module or "").partition(".")[0])


def missing_message(module: str, what: str) -> str:
    """One line: ``what`` needs ``module``, and the command that installs it."""
    extra = extra_for(module) or "all"
    return (f"{what} needs {module}, which is not installed: run {install_command(extra)} "
            "in the evalstop checkout")
