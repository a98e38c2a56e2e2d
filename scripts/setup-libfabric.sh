#!/usr/bin/env bash
# Builds libfabric 2.x, what EFA hosts run, into .tools/libfabric, once: Debian trixie's source
# package (2.1.0), fetched with `apt-get source` through a private apt configuration (its own
# source list, lists and cache under .tools/libfabric-apt: the machine's apt sources are not
# touched), with the efa, shm, tcp and rxm providers and CUDA HMEM (dlopen'ed at run time;
# headers from the pinned CUDA wheels of scripts/setup-cuda.sh). Cached: a second call prints
# the prefix at once. The first prints its build time on stderr (also in PREFIX/.build-seconds).
# Needs root or sudo only to install missing build tools (autoconf, automake, libtool).
# Usage: scripts/setup-libfabric.sh   (prints the prefix; build against it with
#        PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, run with LD_LIBRARY_PATH=PREFIX/lib)
set -euo pipefail
cd "$(dirname "$0")/.."
# Standard output carries the prefix only (callers capture it): everything else goes to stderr.
exec 3>&1 1>&2
VERSION=2.1.0
PREFIX="$PWD/.tools/libfabric"
APT="$PWD/.tools/libfabric-apt"
OPTS="--disable-static --enable-efa --enable-shm --enable-tcp --enable-rxm --disable-verbs
  --disable-sockets --disable-udp --disable-rxd --disable-mrail --disable-usnic --disable-psm2
  --disable-psm3 --disable-opx --disable-ucx --disable-lnx --disable-sm2 --disable-lpp
  --enable-cuda-dlopen"
STAMP="$VERSION $(echo $OPTS)"
if [ -f "$PREFIX/lib/pkgconfig/libfabric.pc" ] && [ "$(cat "$PREFIX/.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "$PREFIX" >&3
  exit 0
fi
t0=$(date +%s)
need=()
# (debian-archive-keyring: Debian has it; on Ubuntu it comes from universe, and verifies the
# Debian source index below.)
for p in autoconf automake libtool make gcc pkg-config libibverbs-dev debian-archive-keyring; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup-libfabric: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
CUDA="$PWD/.tools/cuda/nvidia/cu13"
bash scripts/setup-cuda.sh >/dev/null
# libfabric's CUDA support also includes nvml.h, which the compiler's wheels lack: the header
# from NVIDIA's nvml-dev wheel of the same CUDA release, into a folder of its own.
NVML="$APT/nvml"
if [ ! -f "$NVML/nvidia/cu13/include/nvml.h" ]; then
  rm -rf "$NVML" && mkdir -p "$NVML"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$NVML" \
    nvidia-nvml-dev==13.0.87
  python3 -c "import glob, sys, zipfile; zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]).extractall(sys.argv[1])" "$NVML"
fi
# The private apt state: trixie's sources only, verified with Debian's archive key.
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  > "$APT/sources.list"
apt_priv() {
  apt-get -qq -o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" "$@"
}
echo "setup-libfabric: fetching libfabric $VERSION (Debian trixie's source package)" >&2
apt_priv update >/dev/null
# Only the upstream tarball is needed (not Debian's packaging, which some mirrors lack): its
# name and SHA-256 come from the signed Sources index, and it is checked after the download.
# (Printed from an empty folder: apt leaves out the files a folder already has.)
rm -rf "$APT/uris" && mkdir -p "$APT/uris"
line="$(cd "$APT/uris" && apt_priv source --print-uris libfabric | grep "_$VERSION.orig.tar" || true)"
if [ -z "$line" ]; then
  echo "setup-libfabric: trixie's libfabric source package is not $VERSION any more" >&2
  exit 1
fi
name="$(echo "$line" | awk '{print $2}')"
sha="$(echo "$line" | awk '{print $4}' | sed 's/^SHA256://')"
orig="$APT/src/$name"
if ! echo "$sha  $orig" | sha256sum -c --quiet - >/dev/null 2>&1; then
  (cd "$APT/src" && apt_priv source --download-only libfabric >/dev/null 2>&1) || true
  echo "$sha  $orig" | sha256sum -c --quiet - || {
    echo "setup-libfabric: could not fetch $name (or its SHA-256 differs from the index)" >&2
    exit 1
  }
fi
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT
tar -xf "$orig" -C "$BUILD"
cd "$BUILD"/libfabric-*
# The release tarball in the source package has no configure script.
[ -x configure ] || ./autogen.sh >"$BUILD/autogen.log" 2>&1 || {
  tail -20 "$BUILD/autogen.log" >&2
  exit 1
}
echo "setup-libfabric: building into $PREFIX" >&2
# shellcheck disable=SC2086
./configure --prefix="$PREFIX" $OPTS --with-cuda="$CUDA" \
  CPPFLAGS="-I$NVML/nvidia/cu13/include" >"$BUILD/configure.log" 2>&1 || {
  tail -30 "$BUILD/configure.log" >&2
  exit 1
}
rm -rf "$PREFIX"
make -j"$(nproc)" >"$BUILD/make.log" 2>&1 || {
  tail -30 "$BUILD/make.log" >&2
  exit 1
}
make install >"$BUILD/install.log" 2>&1
cp "$BUILD/configure.log" "$PREFIX/configure.log"
echo "$STAMP" >"$PREFIX/.stamp"
secs=$(($(date +%s) - t0))
echo "$secs" >"$PREFIX/.build-seconds"
echo "setup-libfabric: libfabric $VERSION built in $secs s" >&2
echo "$PREFIX" >&3
