#!/usr/bin/env bash
# The service tests: the 'service' extra, and a PostgreSQL server for tests/service (the test
# fixture starts a throwaway server itself, as the 'postgres' OS user, on a free loopback port).
set -euo pipefail
.venv/bin/pip install -q -e '.[service]'
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends postgresql
fi
