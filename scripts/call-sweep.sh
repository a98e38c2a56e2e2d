#!/usr/bin/env bash
# The call sweeps: every function of the C API (capi/tests/c/sweep.c) and every public call of
# the Python package (python/tests/workers/sweep.py) with bad arguments, before init, in a
# running job (direct and through the proxy) and after finalize. Each call must give its typed
# error with a message naming what is wrong; prints each sweep's counts and every call that did
# not (BAD lines). CI runs the same checks through scripts/test.sh (capi.rs
# every_c_call_with_bad_arguments_is_a_typed_error, test_host.py
# test_every_call_with_bad_arguments_is_a_typed_error); the environment's sweep is
# scripts/env-sweep.sh.
# Usage: scripts/call-sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/python-env.sh >/dev/null
cargo build --release --quiet -p pshmem-capi -p pshmem-tools
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cc -std=c99 -Wall -Wextra -Werror -Icapi/include -Iabi/include capi/tests/c/sweep.c \
  -Ltarget/release -lpshmem -Wl,-rpath,"$PWD/target/release" -o "$out/sweep"
fail=0
for p2p in 0 1; do
  for what in "c:$out/sweep" "python:.venv/bin/python python/tests/workers/sweep.py"; do
    name="${what%%:*}"
    # shellcheck disable=SC2086 # the command's words
    if ! PSHMEM_DISABLE_P2P=$p2p PSHMEM_DISABLE_CUDA=1 PSHMEM_SYMMETRIC_SIZE=16M \
      target/release/pshmrun -n 2 --timeout 120 -- ${what#*:} >"$out/log" 2>&1; then
      fail=1
    fi
    grep -E "SWEEP|BAD" "$out/log" | grep "^\[0\]" | sed "s/^/$name p2p-off=$p2p /"
    grep -q "BAD" "$out/log" && fail=1
  done
done
[ "$fail" = 0 ] && echo "call-sweep: every bad call refused with its typed error" || echo "call-sweep: FAILED"
exit "$fail"
