#!/usr/bin/env bash
# Run the two-replica stack (compose.yaml) with podman compose, podman-compose or docker compose.
#   deploy/compose/stack.sh up | restart | rotate-admin-token | stop | down | down-volumes | ps | logs
# up        first use: writes .env (a random PostgreSQL password) and secrets/ (a random admin
#           token, adapter settings `{}`), all readable by you only, then starts the stack and
#           waits until both replicas answer /readyz. Later: starts what is stopped; when
#           SERVICE_IMAGE names another image than the replicas run (an upgrade), runs that
#           image's migration, then replaces the replicas one at a time, each ready before the next.
# restart   restarts the replicas one at a time (after editing secrets/adapter-settings.json).
# rotate-admin-token  writes a new token to secrets/admin-token, then restarts as `restart` does.
# stop, down, down-volumes  stop (and remove; and delete the database) giving each container its
#           stop_grace_period (compose.yaml) to drain; down also removes the stack's network.
# Nothing secret is printed: the compose tool's output (which shows every `podman run` line, the
# database URL included) goes to .stack.log with the password and token replaced by ***, and is
# shown only when a step fails. COMPOSE="docker compose" picks docker; COMPOSE_PROJECT_NAME
# (default evalstop) names the stack; SERVICE_IMAGE, POSTGRES_IMAGE, PORT_A, PORT_B (environment
# or .env) its images and ports.
set -euo pipefail
cd "$(dirname "$0")"
project="${COMPOSE_PROJECT_NAME:-evalstop}"
if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose <<<"$COMPOSE"
elif command -v podman >/dev/null 2>&1 && podman compose version >/dev/null 2>&1; then
  compose=(podman compose)
elif command -v podman-compose >/dev/null 2>&1; then
  compose=(podman-compose)
else
  compose=(docker compose)
fi
case "${compose[0]}" in *docker*) engine=docker ;; *) engine=podman ;; esac
compose+=(-p "$project")
log=.stack.log
grace="$(sed -n 's/^ *stop_grace_period: *\([0-9][0-9]*\)s *$/\1/p' compose.yaml | head -n1)"
from_env() { sed -n "s/^$1=//p" .env 2>/dev/null | tail -n1; }
image="${SERVICE_IMAGE:-$(from_env SERVICE_IMAGE)}"
image="${image:-localhost/evalstop:0.1.0}"
port_of() {
  case "$1" in
    replica-a) p="${PORT_A:-$(from_env PORT_A)}"; echo "${p:-8001}" ;;
    replica-b) p="${PORT_B:-$(from_env PORT_B)}"; echo "${p:-8002}" ;;
  esac
}
replicas=(replica-a replica-b)
secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }

init() {
  umask 077
  touch "$log"
  [ -f .env ] || printf 'POSTGRES_PASSWORD=%s\n' "$(secret)" > .env
  mkdir -p secrets  # 0700: the files below are 0644 only so that uid 10001 reads its bind mounts
  if [ ! -s secrets/admin-token ]; then
    secret > secrets/admin-token
    echo "admin token written to $(pwd)/secrets/admin-token"
  fi
  [ -s secrets/adapter-settings.json ] || echo '{}' > secrets/adapter-settings.json
  chmod 0644 secrets/admin-token secrets/adapter-settings.json
}

redact() {  # stdin to stdout with the PostgreSQL password and the admin token replaced by ***
  python3 -c '
import sys
secrets = [s for s in sys.argv[1:] if s]
for line in sys.stdin:
    for s in secrets:
        line = line.replace(s, "***")
    sys.stdout.write(line)
' "$(from_env POSTGRES_PASSWORD)" "$(cat secrets/admin-token 2>/dev/null || true)"
}

quiet() {  # run "$@" with its output (redacted) appended to .stack.log; on failure show its end
  local rc=0
  echo "\$ $*" >>"$log"
  { "$@" 2>&1 | redact >>"$log"; } || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$0: '$*' failed (status $rc); the end of $(pwd)/$log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

containers() { "$engine" ps -a -q --filter "label=com.docker.compose.project=$project" \
                 --filter "label=com.docker.compose.service=$1"; }

wait_ready() {  # $1: a replica service
  local port
  port="$(port_of "$1")"
  for _ in $(seq 1 180); do
    if python3 -c "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:$port/readyz', timeout=2).status != 200)" 2>/dev/null; then
      echo "$1 on 127.0.0.1:$port is ready"
      return 0
    fi
    sleep 1
  done
  echo "$1 on 127.0.0.1:$port not ready after 180 s; see: $0 logs" >&2
  exit 1
}

wait_migrated() {
  local state=""
  for _ in $(seq 1 300); do
    state="$("$engine" inspect --format '{{.State.Status}} {{.State.ExitCode}}' $(containers migrate) 2>/dev/null || true)"
    if [ "$state" = "exited 0" ]; then
      echo "migration done"
      return 0
    fi
    sleep 1
  done
  echo "the migration has not finished after 300 s (state: ${state:-none}); see: $0 logs" >&2
  exit 1
}

stale() {  # true when a replica runs another image than $image
  local want have id
  want="$("$engine" image inspect --format '{{.Id}}' "$image" 2>/dev/null)" || {
    echo "$0: the image $image does not exist here (build it: docs/deploy.md, Build)" >&2; exit 1; }
  for svc in "${replicas[@]}"; do
    for id in $(containers "$svc"); do
      have="$("$engine" inspect --format '{{.Image}}' "$id")"
      [ "${have#sha256:}" != "${want#sha256:}" ] && return 0
    done
  done
  return 1
}

stop_service() {  # $1: a service; its containers get the full grace period to drain
  local ids
  ids="$(containers "$1")"
  [ -z "$ids" ] || quiet "$engine" stop -t "$grace" $ids
}

replace() {  # $1: a replica service: remove it, create it from $image, wait until ready
  local ids
  stop_service "$1"
  ids="$(containers "$1")"
  [ -z "$ids" ] || quiet "$engine" rm $ids
  quiet "${compose[@]}" up -d "$1"
  wait_ready "$1"
}

up() {
  init
  if [ -n "$(containers replica-a)$(containers replica-b)" ] && stale; then
    echo "upgrading to $image: its migration, then one replica at a time"
    local ids
    ids="$(containers migrate)"
    [ -z "$ids" ] || quiet "$engine" rm -f $ids
    quiet "${compose[@]}" up -d migrate
    wait_migrated
    for svc in "${replicas[@]}"; do replace "$svc"; done
    return 0
  fi
  quiet "${compose[@]}" up -d
  for svc in "${replicas[@]}"; do wait_ready "$svc"; done
}

rolling_restart() {
  for svc in "${replicas[@]}"; do
    stop_service "$svc"
    quiet "$engine" start $(containers "$svc")
    wait_ready "$svc"
  done
}

down() {  # $@: extra arguments of `compose down`
  for svc in "${replicas[@]}" migrate postgres; do stop_service "$svc"; done
  quiet "${compose[@]}" down -t "$grace" "$@"
  local nets
  nets="$("$engine" network ls -q --filter "label=com.docker.compose.project=$project")"
  [ -z "$nets" ] || quiet "$engine" network rm $nets
}

case "${1:-}" in
  up) up ;;
  restart) init; rolling_restart ;;
  rotate-admin-token)
    init
    secret > secrets/admin-token  # in place: the containers' bind mount sees the same file
    echo "new admin token written to $(pwd)/secrets/admin-token; restarting the replicas one at a time"
    rolling_restart ;;
  stop) for svc in "${replicas[@]}" migrate postgres; do stop_service "$svc"; done ;;
  down) down ;;
  down-volumes) down -v ;;
  ps) "${compose[@]}" ps 2>&1 | redact ;;
  logs) "${compose[@]}" logs 2>&1 | redact ;;
  *) echo "usage: $0 up|restart|rotate-admin-token|stop|down|down-volumes|ps|logs" >&2; exit 2 ;;
esac
