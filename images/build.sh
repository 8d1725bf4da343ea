#!/usr/bin/env bash
# Build the images locally with buildah (no daemon, no registry): `make images`.
#
#   images/build.sh [base|python|shard|shard-cuda|operator|all]     (default: all)
#
# base      Ubuntu 24.04 rootfs made by mmdebstrap, imported as localhost/themis-base:ubuntu24.04
# python    base + Python 3.12 (localhost/themis-python:3.12, the operator's PYTHON_IMAGE)
# shard     Dockerfile.shard, CPU variant  -> localhost/themis-shard:cpu
# shard-cuda Dockerfile.shard, CUDA variant -> localhost/themis-shard:cuda (not in "all": llama.cpp's
#           CUDA backend compiles for hours on 2 cores; CUDA toolkit from NVIDIA's PyPI wheels, no
#           GPU or driver needed; THEMIS_CUDA_ARCHITECTURES, default "80;86;89;90")
# operator  Dockerfile.operator            -> localhost/themis-operator:dev
#
# Storage is buildah's vfs driver (no overlay or fuse needed); layers are cached (--layers) and
# RUN --mount=type=cache keeps pip's and ccache's caches across builds. Builds run at nice 19: the
# development machines are shared. Each step prints its time and the image's size.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILDAH=(buildah --storage-driver "${THEMIS_BUILDAH_STORAGE_DRIVER:-vfs}")
WORK=${THEMIS_IMAGES_WORK:-/var/tmp/themis-images}
SUITE=noble
MIRROR=http://archive.ubuntu.com/ubuntu
SECURITY=http://security.ubuntu.com/ubuntu
# The Ubuntu archive's signing key (2018), pinned by fingerprint: the keyring package is fetched
# from the archive and refused unless it carries exactly this key.
UBUNTU_KEY=F6ECB3762474EDA9D21B7022871920D1991BC93C
BASE=localhost/themis-base:ubuntu24.04
PYTHON=localhost/themis-python:3.12
SHARD=${THEMIS_SHARD_IMAGE:-localhost/themis-shard:cpu}
SHARD_CUDA=${THEMIS_SHARD_CUDA_IMAGE:-localhost/themis-shard:cuda}
OPERATOR=${THEMIS_OPERATOR_IMAGE:-localhost/themis-operator:dev}
BUD=(nice -n 19 "${BUILDAH[@]}" bud --isolation chroot --layers --format docker
     --build-arg "VERSION=$(cat VERSION)"
     --build-arg "REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")
# The host's CA bundle (it may hold a TLS-intercepting proxy's CA) for pip inside the build only:
# bind-mounted into RUN steps, never committed into a layer.
HOST_CA=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [ -s "$HOST_CA" ]; then
    BUD+=(--volume "$HOST_CA:/run/themis-build-ca.crt:ro" --build-arg PIP_CERT=/run/themis-build-ca.crt)
fi

need() { command -v "$1" >/dev/null || { echo "$1 not found: apt-get install -y buildah mmdebstrap" >&2; exit 1; }; }
exists() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }
report() { # NAME SECONDS
    local size
    size=$("${BUILDAH[@]}" images --format '{{.Size}}' "$1" | head -n 1)
    echo "image $1: built in $2 s, size $size"
}

ubuntu_keyring() {
    local out=$WORK/ubuntu-archive-keyring.gpg deb
    [ -s "$out" ] && return
    deb=$(curl -fsS "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.gz" | zcat \
          | awk '/^Package: ubuntu-keyring$/{p=1} p&&/^Filename:/&&!done{print $2; done=1}')
    curl -fsS -o "$WORK/ubuntu-keyring.deb" "$MIRROR/$deb"
    rm -rf "$WORK/keyring" && dpkg-deb -x "$WORK/ubuntu-keyring.deb" "$WORK/keyring"
    if ! gpg --show-keys --with-colons "$WORK/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" \
         | grep -q "^fpr:::::::::$UBUNTU_KEY:"; then
        echo "ubuntu-keyring from $MIRROR does not carry the archive key $UBUNTU_KEY: refused" >&2
        exit 1
    fi
    cp "$WORK/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$out"
}

build_base() {
    exists "$BASE" && { echo "image $BASE: present"; return; }
    need mmdebstrap
    mkdir -p "$WORK"
    ubuntu_keyring
    local t0=$SECONDS ctr
    nice -n 10 mmdebstrap --variant=minbase --components=main,universe --include=apt,ca-certificates \
        --keyring="$WORK/ubuntu-archive-keyring.gpg" "$SUITE" "$WORK/$SUITE.tar" \
        "deb $MIRROR $SUITE main universe" "deb $MIRROR $SUITE-updates main universe" \
        "deb $SECURITY $SUITE-security main universe"
    ctr=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" add "$ctr" "$WORK/$SUITE.tar" /
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$ctr"
    "${BUILDAH[@]}" commit --rm "$ctr" "$BASE" >/dev/null
    report "$BASE" $((SECONDS - t0))
}

build_python() {
    build_base
    local t0=$SECONDS
    "${BUD[@]}" -f images/Containerfile.python --build-arg "BASE_IMAGE=$BASE" -t "$PYTHON" images
    report "$PYTHON" $((SECONDS - t0))
}

build_shard() {
    build_base
    local t0=$SECONDS
    "${BUD[@]}" -f Dockerfile.shard \
        --build-arg "BUILD_IMAGE=$BASE" --build-arg "RUNTIME_IMAGE=$BASE" \
        --build-arg ACCELERATOR=cpu --build-arg USE_GPU=false --build-arg N_GPU_LAYERS=0 \
        -t "$SHARD" .
    report "$SHARD" $((SECONDS - t0))
}

build_shard_cuda() {
    build_base
    local t0=$SECONDS
    "${BUD[@]}" -f Dockerfile.shard \
        --build-arg "BUILD_IMAGE=$BASE" --build-arg "RUNTIME_IMAGE=$BASE" \
        --build-arg ACCELERATOR=cuda --build-arg USE_GPU=true --build-arg N_GPU_LAYERS=-1 \
        --build-arg "CUDA_ARCHITECTURES=${THEMIS_CUDA_ARCHITECTURES:-80;86;89;90}" \
        -t "$SHARD_CUDA" .
    report "$SHARD_CUDA" $((SECONDS - t0))
}

build_operator() {
    build_python
    local t0=$SECONDS
    "${BUD[@]}" -f Dockerfile.operator --build-arg "PYTHON_IMAGE=$PYTHON" -t "$OPERATOR" .
    report "$OPERATOR" $((SECONDS - t0))
}

need buildah
case "${1:-all}" in
    base) build_base ;;
    python) build_python ;;
    shard) build_shard ;;
    shard-cuda) build_shard_cuda ;;
    operator) build_operator ;;
    all) build_operator && build_shard ;;
    *) echo "usage: $0 [base|python|shard|shard-cuda|operator|all]" >&2; exit 2 ;;
esac
