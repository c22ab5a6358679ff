#!/usr/bin/env bash
# Install the Debian packages imagebuild's engine, bootstrap and registry tests need. Idempotent; needs root.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v skopeo >/dev/null || need+=(skopeo)  # push: zstd/gzip layers written by digest (push/skopeo.py)
command -v htpasswd >/dev/null || need+=(apache2-utils)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v gpg >/dev/null || need+=(gpg)  # bootstrap: exports the pinned archive keys
command -v gpgv >/dev/null || need+=(gpgv)  # scripts/modern-engine.sh: verifies trixie's InRelease
command -v xz >/dev/null || need+=(xz-utils)
command -v mksquashfs >/dev/null || need+=(squashfs-tools)  # imagebuild export: enroot/pyxis .sqsh, --check
# scripts/binfmt.sh: QEMU user emulation (linux/arm64 builds and tests on an amd64 machine)
[[ -e /usr/lib/binfmt.d/qemu-aarch64.conf ]] || need+=(qemu-user-static)
command -v arch-test >/dev/null || need+=(arch-test)  # mmdebstrap: bootstraps a foreign architecture only with it
# tests/integration/test_dev_clients.py: JupyterLab in headless Chromium (selenium drives it), ssh as a real client
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v ssh >/dev/null || need+=(openssh-client)
if ((${#need[@]})); then
  echo "system-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "system-deps: ok" >&2
