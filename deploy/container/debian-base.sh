#!/usr/bin/env bash
# Makes the Debian 12 base image the Containerfile starts from, for a machine that can
# reach Debian's archive but not a container registry: debootstrap a minimal bookworm
# and import it under the name the Containerfile pulls, so that no pull is needed.
#   deploy/container/debian-base.sh [IMAGE]     (default docker.io/library/debian:12)
# Needs root, debootstrap and podman (Debian: apt-get install debootstrap podman).
set -euo pipefail
image="${1:-docker.io/library/debian:12}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
command -v debootstrap > /dev/null || { echo "debian-base: needs debootstrap" >&2; exit 1; }
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "debian-base: debootstrap bookworm from $mirror (a few minutes)"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1 || {
  tail -n 20 "$rootfs.log" >&2
  exit 1
}
rm -f "$rootfs.log"
# Package lists are left out, as in Debian's own images: a build runs apt-get update.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$image" > /dev/null
echo "debian-base: $image"
