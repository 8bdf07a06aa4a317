#!/usr/bin/env bash
# Build a Debian bookworm base image with Python 3 (python3, python3-venv) from Debian's own
# packages, for machines that cannot pull a registry image (CI). Idempotent: an image already in
# podman's storage is kept (delete it with `podman rmi IMAGE` to rebuild).
#   deploy/container/debian-base.sh [IMAGE]      (default localhost/evalstop-base:bookworm)
# The Debian mirror is the one apt uses here (DEBIAN_MIRROR overrides it).
set -euo pipefail
image="${1:-localhost/evalstop-base:bookworm}"
if podman image exists "$image"; then
  echo "base image $image exists; kept" >&2
  exit 0
fi
mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1 || true)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"
rootfs="$(mktemp -d /var/tmp/evalstop-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >&2
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >&2
echo "built base image $image from $mirror" >&2
