#!/usr/bin/env bash
# Bring the two-replica stack (compose.yaml) up or down with podman compose or docker compose.
#   deploy/compose/stack.sh up | down | down-volumes | ps | logs
# On first use it writes .env (a random PostgreSQL password) and secrets/admin-token (a random
# operator token, printed once), both readable by you only. COMPOSE="docker compose" picks docker;
# by default podman compose (or podman-compose) is used when podman is installed.
set -euo pipefail
cd "$(dirname "$0")"
if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose <<<"$COMPOSE"
elif command -v podman >/dev/null 2>&1 && podman compose version >/dev/null 2>&1; then
  compose=(podman compose)
elif command -v podman-compose >/dev/null 2>&1; then
  compose=(podman-compose)
else
  compose=(docker compose)
fi
secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
init() {
  umask 077
  [ -f .env ] || printf 'POSTGRES_PASSWORD=%s\n' "$(secret)" > .env
  mkdir -p secrets
  if [ ! -s secrets/admin-token ]; then
    secret > secrets/admin-token
    echo "admin token (also in $(pwd)/secrets/admin-token): $(cat secrets/admin-token)"
  fi
  # the service runs as uid 10001 in its container and reads the token through a bind mount
  chmod 0644 secrets/admin-token
}
wait_ready() {
  for port in "${PORT_A:-8001}" "${PORT_B:-8002}"; do
    for _ in $(seq 1 120); do
      if python3 -c "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:$port/readyz', timeout=2).status != 200)" 2>/dev/null; then
        echo "replica on 127.0.0.1:$port is ready"
        continue 2
      fi
      sleep 1
    done
    echo "replica on 127.0.0.1:$port not ready after 120 s; see: $0 logs" >&2
    exit 1
  done
}
case "${1:-}" in
  up) init; "${compose[@]}" up -d; wait_ready ;;
  down) "${compose[@]}" down ;;
  down-volumes) "${compose[@]}" down -v ;;
  ps) "${compose[@]}" ps ;;
  logs) "${compose[@]}" logs ;;
  *) echo "usage: $0 up|down|down-volumes|ps|logs" >&2; exit 2 ;;
esac
