#!/usr/bin/env bash
# A results folder under benches/results/ keeps its reports (*.md), plots (*.svg, *.png) and the
# summary JSON that other tools read back (ep-ll.json and ep-ht.json: the EFA model's inputs and
# multi_report.py's; ab.json, efa-model.json, p2p.json, proxy-capacity-ab*.json) as files; every
# other file (logs, per-run JSON, proxy traces: what the generators read to make those) lives in
# one archive, DIR/raw.tar.xz, about a tenth of their size.
#   pack DIR          moves DIR's other files into DIR/raw.tar.xz (merged with the archive already
#                     there; a loose file replaces its archived copy). The archive depends only on
#                     the files' paths, bytes and executable bits, so packing the same data again
#                     gives the same bytes and no diff. Stage the result with `git add -A DIR`.
#   unpack DIR [DEST] copies DIR's kept files and extracts its archive into DEST (default
#                     target/results/NAME, emptied first; another DEST must be empty and outside
#                     benches/results), where a generator can rerun without writing into the tree:
#                     python3 ep/bench/report.py target/results/ep-ll-h100/raw
#                     Prints DEST.
# Usage: scripts/results.sh pack DIR | unpack DIR [DEST]   (paths from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "results: $*" >&2; exit 1; }

# What stays a file. By name, wherever it lies in the folder: no raw file has one of these names.
kept() {
  case "${1##*/}" in
    *.md | *.svg | *.png | raw.tar.xz | ep-ll.json | ep-ht.json | ab.json | efa-model.json | \
      p2p.json | proxy-capacity-ab*.json) return 0 ;;
  esac
  return 1
}

pack() {
  local dir="${1%/}"
  [ -d "$dir" ] || die "$dir: no such folder"
  # One archive per results folder, not one of the whole tree.
  [ "$(realpath "$dir")" != "$(realpath benches/results)" ] ||
    die "pack a folder of benches/results, not the folder itself"
  STAGE="$(mktemp -d)"
  trap 'rm -rf "$STAGE"' EXIT
  (cd "$dir" && find . -type f -print0) | while IFS= read -r -d '' f; do
    kept "$f" || printf '%s\0' "${f#./}"
  done > "$STAGE/loose"
  if [ ! -s "$STAGE/loose" ]; then
    echo "results: $dir: nothing to pack"
    return
  fi
  mkdir "$STAGE/tree"
  if [ -f "$dir/raw.tar.xz" ]; then
    xz -dc "$dir/raw.tar.xz" | tar -xf - -C "$STAGE/tree"
  fi
  (cd "$dir" && tar --null --verbatim-files-from --no-recursion -T "$STAGE/loose" -cf -) |
    tar -xf - -C "$STAGE/tree"
  # The files alone (no directory entries), in byte order of their paths (tar's --sort does not
  # apply to a list), with every field a checkout or an extraction could change pinned: times,
  # owners, modes but the execute bit. -T1: the multi-threaded encoder, xz's default from 5.6,
  # writes a different stream.
  (cd "$STAGE/tree" && find . -type f -printf '%P\0' | LC_ALL=C sort -z) > "$STAGE/all"
  (cd "$STAGE/tree" && tar --format=gnu --null --verbatim-files-from --no-recursion \
    -T "$STAGE/all" --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=a=rX,u+w -cf -) |
    xz -9e -T1 -c > "$STAGE/raw.tar.xz"
  mv "$STAGE/raw.tar.xz" "$dir/raw.tar.xz"
  (cd "$dir" && xargs -0 rm -f --) < "$STAGE/loose"
  find "$dir" -mindepth 1 -type d -empty -delete
  echo "results: $dir/raw.tar.xz: $(tr -cd '\0' < "$STAGE/all" | wc -c) files," \
    "$(stat -c %s "$dir/raw.tar.xz") bytes"
}

unpack() {
  local dir="${1%/}" dest="${2:-}" into
  [ -d "$dir" ] || die "$dir: no such folder"
  if [ -z "$dest" ]; then
    dest="target/results/$(basename "$(realpath "$dir")")"
    rm -rf "$dest"
  fi
  # Regenerated reports and plots land beside the raw files; inside the tree they would be
  # untracked noise or, worse, overwrite the committed ones.
  into="$(realpath -m "$dest")/"
  case "$into" in
    "$(realpath benches/results)"/* | "$(realpath "$dir")"/*)
      die "$dest: inside the results, unpack elsewhere" ;;
  esac
  if [ -d "$dest" ] && [ -n "$(ls -A "$dest")" ]; then
    die "$dest: not empty"
  fi
  mkdir -p "$dest"
  cp -R "$dir/." "$dest/"
  rm -f "$dest/raw.tar.xz"
  if [ -f "$dir/raw.tar.xz" ]; then
    # -m: the files get the time of extraction, not the archive's pinned 1970.
    xz -dc "$dir/raw.tar.xz" | tar -xmf - -C "$dest"
  fi
  echo "$dest"
}

case "${1:-}" in
  pack) [ $# -eq 2 ] || die "usage: scripts/results.sh pack DIR"; pack "$2" ;;
  unpack)
    [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: scripts/results.sh unpack DIR [DEST]"
    unpack "$2" "${3:-}" ;;
  *) die "usage: scripts/results.sh pack DIR | unpack DIR [DEST]" ;;
esac
