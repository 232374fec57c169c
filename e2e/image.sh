#!/usr/bin/env bash
# Builds compositor's image as an OCI archive without a container engine, with the layout the
# Dockerfile gives (same entrypoint, user, environment and files; tests/image.rs compares them),
# and prints the archive's path last. Load it with `ctr -n k8s.io images import ARCHIVE` or
# `docker load -i ARCHIVE`.
#
#   IMAGE_ARCHIVE  where to write it (default: <cargo target dir>/image/compositor-<version>.tar)
#   IMAGE_NAME     its reference (default: localhost/compositor:<chart appVersion>)
#   COMPOSITOR_BIN a binary to pack instead of a fresh release build
#
# The binary is linked against glibc (no musl target on these machines), so the image carries
# exactly the shared libraries it loads, at the paths the dynamic loader looks them up.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=e2e/versions.sh
. "$ROOT/e2e/versions.sh"

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/compositor/Chart.yaml")
target=${CARGO_TARGET_DIR:-$ROOT/target}
archive=${IMAGE_ARCHIVE:-$target/image/compositor-$version.tar}
name=${IMAGE_NAME:-localhost/compositor:$version}
engine=${HELM_ENGINE:-$(helm_engine_bin)}
[ -x "$engine" ] || { echo "no helm-engine at $engine: run e2e/install-deps.sh" >&2; exit 1; }

bin=${COMPOSITOR_BIN:-}
if [ -z "$bin" ]; then
  (cd "$ROOT" && cargo build --locked --release --bin compositor) >&2
  bin=$target/release/compositor
fi

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
install -D -m 0755 "$bin" "$rootfs/usr/local/bin/compositor"
install -D -m 0755 "$engine" "$rootfs/usr/local/bin/helm-engine"
# The shared libraries and the loader, each at the path the binary resolves it to.
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
# The users of distroless' nonroot image, which the Dockerfile builds on.
install -d "$rootfs/etc" "$rootfs/home/nonroot" "$rootfs/root"
install -d -m 1777 "$rootfs/tmp"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$rootfs/etc/passwd"
printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"

mkdir -p "$(dirname "$archive")"
python3 "$ROOT/e2e/ociarchive.py" --rootfs "$rootfs" --name "$name" --out "$archive" \
  --owner home/nonroot=65532:65532 \
  --entrypoint '["compositor"]' --user 65532:65532 --workdir /home/nonroot --expose 8080/tcp \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --env HOME=/tmp --env TMPDIR=/tmp --env HELM_ENGINE=/usr/local/bin/helm-engine
echo "$archive"
