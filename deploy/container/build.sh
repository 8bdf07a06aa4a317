#!/usr/bin/env bash
# Build the evalstop image with podman, from any folder (docs/deploy.md, "Build"; CI runs this too).
#   deploy/container/build.sh [--tag IMAGE] [--base IMAGE | --debian-base] [--wheels-from-host]
#                             [--ca-file FILE] [--runtime NAME] [--ulimit SPEC]...
#                             [-- EXTRA PODMAN BUILD ARGUMENTS]
# --tag            the image to make (default localhost/evalstop:0.1.0)
# --base           the base of both stages: any image with Python >= 3.11 and its venv module
#                  (default docker.io/library/python:3.12-slim-bookworm)
# --debian-base    no registry: make localhost/evalstop-base:bookworm with debootstrap
#                  (debian-base.sh, kept once made) and use it
# --wheels-from-host  fill deploy/container/wheels/ with a wheel of every requirement (and of the
#                  build backend, setuptools>=77) made by the host's pip with the host's own index,
#                  certificate and proxy settings, for the base's Python (its version is read from
#                  the base image), then build with PIP_NO_INDEX=1: the build reaches no index
# --ca-file FILE   without --wheels-from-host: a CA bundle for the build stage's pip (an index
#                  behind a TLS-inspecting proxy); given as a build secret, so it is in no layer
# --runtime, --ulimit  passed to podman (where crun fails: --runtime runc --ulimit
#                  nofile=1024:1024 --ulimit nproc=1024:1024)
# Without --wheels-from-host the build stage's pip uses PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and
# PIP_TRUSTED_HOST from this script's environment (build arguments of that stage only).
# PYTHON names the host's Python for --wheels-from-host (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tag=localhost/evalstop:0.1.0
base=docker.io/library/python:3.12-slim-bookworm
debian_base=0 host_wheels=0 ca_file="${PIP_CERT:-}" run_opts=()
die() { echo "build.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="${2:?--tag needs an image name}"; shift 2 ;;
    --base) base="${2:?--base needs an image}"; shift 2 ;;
    --debian-base) debian_base=1; shift ;;
    --wheels-from-host) host_wheels=1; shift ;;
    --ca-file) ca_file="${2:?--ca-file needs a file}"; shift 2 ;;
    --runtime|--ulimit) run_opts+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the top of $0)" ;;
  esac
done
if [ "$debian_base" = 1 ]; then
  base=localhost/evalstop-base:bookworm
  bash "$here/debian-base.sh" "$base"
fi
args=("${run_opts[@]}" --format docker --build-arg "BASE=$base" -f "$here/Containerfile" -t "$tag")
if [ "$host_wheels" = 1 ]; then
  # the base's Python (major.minor) decides which wheels fit: cp311 wheels do not install on 3.12
  podman image exists "$base" || podman pull -q "$base" >/dev/null
  base_py="$(podman run --rm --network=none "${run_opts[@]}" --entrypoint python3 "$base" -c \
    'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null | tail -n1)" \
    || die "cannot run python3 in the base image $base"
  "${PYTHON:-python3}" "$here/wheels.py" "$root" "$here/wheels" "$base_py"
  args+=(--build-arg PIP_NO_INDEX=1)
else
  for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
    [ -n "${!name:-}" ] && args+=(--build-arg "$name=${!name}")
  done
  if [ -n "$ca_file" ]; then
    [ -r "$ca_file" ] || die "--ca-file: cannot read $ca_file"
    args+=(--secret "id=pip-ca,src=$ca_file")
  fi
fi
podman build "${args[@]}" "$@" "$root"
echo "built $tag on $base" >&2
