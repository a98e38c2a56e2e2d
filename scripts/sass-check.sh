#!/usr/bin/env bash
# Scans the machine code (SASS) of every kernel we build for instruction patterns known to be
# miscompiled, and fails naming the file and the instruction. No GPU needed: cuobjdump reads the
# sm_90 code in fatbins and executables.
#
# The pattern: CUDA 13.0's ptxas stores the low byte of a freshly converted __half or
# __nv_bfloat16 with F2I.U8.F16/BF16 (the value's integer part) instead of its bits, wherever
# a 16-bit float reaches a byte store (`memcpy` of converted halves into global memory lowers
# to byte stores). A 2-line kernel shows it: `__half h = __float2half_rn(x);
# memcpy(byte_ptr, &h, 2);`. It gave wrong 16-bit reductions on 2 H200s
# (benches/results/h200-x2-coll/). No kernel of ours converts a 16-bit float to an 8-bit
# integer on purpose, so any F2I from F16/BF16 to 8 bits is this bug.
#
# Usage: scripts/sass-check.sh [FILE_OR_DIR...]   (default: this checkout's release fatbins and
# the compiled examples/nvshmem programs under target/nvshmem-examples)
set -euo pipefail
cd "$(dirname "$0")/.."
# cuobjdump and nvdisasm (which it runs) are not among the 13.0 wheels; 13.2's read the sm_90
# code of any 13.x compiler.
PINS="nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86"
DIR=.tools/cuobjdump
TOOL=$DIR/nvidia/cu13/bin/cuobjdump
if [ ! -x "$TOOL" ] || [ "$(cat "$DIR/.pins" 2>/dev/null)" != "$PINS" ]; then
  echo "sass-check: fetching $PINS into $DIR" >&2
  rm -rf "$DIR" .tools/cuobjdump-wheels
  mkdir -p "$DIR" .tools/cuobjdump-wheels
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .tools/cuobjdump-wheels $PINS
  python3 - "$DIR" .tools/cuobjdump-wheels/*.whl <<'PY'
import os, sys, zipfile
for w in sys.argv[2:]:
    with zipfile.ZipFile(w) as z:
        for info in z.infolist():
            path = z.extract(info, sys.argv[1])
            if "/bin/" in path:
                os.chmod(path, 0o755)
PY
  rm -rf .tools/cuobjdump-wheels
  echo "$PINS" > "$DIR/.pins"
fi
export NVDISASM_PATH="$PWD/$DIR/nvidia/cu13/bin/nvdisasm"
files=()
if [ "$#" -gt 0 ]; then
  for a in "$@"; do
    if [ -d "$a" ]; then
      while IFS= read -r f; do files+=("$f"); done < <(find "$a" -type f \( -name '*.fatbin' -o -perm -u+x \) | sort)
    else
      files+=("$a")
    fi
  done
else
  # The newest build of each crate's kernels (older hashes' folders may hold stale code).
  for crate in $(ls -d target/release/build/*/out 2>/dev/null | sed 's|.*/build/\(.*\)-[0-9a-f]*/out|\1|' | sort -u); do
    newest="$(ls -td target/release/build/"$crate"-*/out 2>/dev/null | head -1)"
    for f in "$newest"/*.fatbin; do [ -f "$f" ] && files+=("$f"); done
  done
  [ -d target/nvshmem-examples ] && while IFS= read -r f; do files+=("$f"); done \
    < <(find target/nvshmem-examples -type f -perm -u+x | sort)
fi
if [ "${#files[@]}" -eq 0 ]; then
  echo "sass-check: nothing to scan (build first: cargo build --release)" >&2
  exit 1
fi
bad=0
scanned=0
err="$(mktemp)"
trap 'rm -f "$err"' EXIT
for f in "${files[@]}"; do
  # Files without device code (host-only programs) have no SASS; any other failure is an error,
  # so that a broken tool cannot pass the check by scanning nothing.
  if ! sass="$("$TOOL" -sass "$f" 2>"$err")"; then
    grep -q "does not contain device code" "$err" && continue
    echo "sass-check: cuobjdump failed on $f:" >&2
    cat "$err" >&2
    exit 1
  fi
  grep -q "Function :" <<<"$sass" || continue
  scanned=$((scanned + 1))
  hits="$(grep -E 'F2I\.(U8|S8)\.(F16|BF16)' <<<"$sass" || true)"
  if [ -n "$hits" ]; then
    bad=1
    echo "sass-check: $f: a 16-bit float converted to an 8-bit integer (ptxas's byte-store bug):" >&2
    head -5 <<<"$hits" >&2
  fi
done
if [ "$scanned" = 0 ]; then
  echo "sass-check: none of the ${#files[@]} files has device code" >&2
  exit 1
fi
if [ "$bad" != 0 ]; then
  echo "sass-check: FAILED (store 16-bit floats whole, or bit-cast them into an integer register first)" >&2
  exit 1
fi
echo "sass-check: $scanned files with device code, no miscompiled 16-bit byte store"
