"""Write the JSON Schema of every evalstop TOML config into docs/schema/ (or check it is current).

    python scripts/write_schemas.py            # rewrite docs/schema/*.json
    python scripts/write_schemas.py --check    # exit 1 if a file is missing or stale (the tests run this)

The schemas come from the same table declarations the loaders check documents with
(``evalstop.experiments.config_schema``, ``evalstop.service.pull.schema``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from evalstop._schema import describe
from evalstop.experiments.config_schema import SIMULATE, STUDY
from evalstop.service.pull.schema import PULL

FOLDER = Path(__file__).resolve().parents[1] / "docs" / "schema"


def schemas() -> dict[str, dict[str, Any]]:
    return {
        "simulate.json": describe(SIMULATE, "evalstop/simulate.json"),
        "study.json": describe(STUDY, "evalstop/study.json"),
        "pull.json": describe(PULL, "evalstop/pull.json"),
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name, doc in schemas().items():
        path = FOLDER / name
        if "--check" in argv:
            if not path.is_file() or path.read_text(encoding="utf-8") != render(doc):
                stale.append(name)
        else:
            FOLDER.mkdir(parents=True, exist_ok=True)
            path.write_text(render(doc), encoding="utf-8")
    if stale:
        names = ", ".join(stale)
        print(f"docs/schema is stale ({names}): run python scripts/write_schemas.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
