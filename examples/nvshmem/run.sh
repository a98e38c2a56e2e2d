#!/usr/bin/env bash
# Runs the built examples on this machine's GPU(s) under pshmrun and checks that every PE of
# every run printed its OK line: 2 and 4 PEs (on one GPU they share it: start CUDA MPS first),
# and 2 PEs through the proxy (NVSHMEM_DISABLE_P2P=1); each example with and without -rdc;
# the unique-id program on 2 and 4 PEs; a ring started torchrun-style (environment only); the
# collectives on 4 PEs as 2 emulated hosts of 2 (mixed teams: mapped and proxied members).
# Usage: run.sh EXAMPLES_DIR NVSHMEM_HOME PSHMRUN LOG   (EXAMPLES_TIMEOUT: seconds per run, 120)
set -uo pipefail
EX="$1"
TREE="$2"
PSHMRUN="$3"
LOG="$4"
export LD_LIBRARY_PATH="$TREE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-256M}"
export PSHMEM_SYMMETRIC_SIZE="${PSHMEM_SYMMETRIC_SIZE:-64M}"
fail=0
runs=0
one() { # name pes env... -- prog args...
  local name="$1" pes="$2"
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out
  out="$(env "${envs[@]}" "$PSHMRUN" -n "$pes" --timeout "${EXAMPLES_TIMEOUT:-120}" -- "$@" 2>&1)"
  local rc=$?
  local oks
  oks="$(grep -c "] OK " <<<"$out")"
  runs=$((runs + 1))
  if [ "$rc" -ne 0 ] || [ "$oks" -ne "$pes" ]; then
    fail=$((fail + 1))
    echo "FAILED $name pes=$pes ${envs[*]} (rc $rc, $oks OK lines)" | tee -a "$LOG"
    echo "$out" | tail -30 | tee -a "$LOG"
    # A killed MPS client's context takes the server a moment to tear down; the next job's
    # cudaSetDevice would otherwise find the GPU busy.
    sleep 3
  else
    echo "passed $name pes=$pes ${envs[*]}" | tee -a "$LOG"
    grep "] OK " <<<"$out" | head -2 >>"$LOG"
  fi
}
for prog in ring put_block ping_pong atomics team_split collective_launch on_stream collectives vector_waits two_file; do
  for v in "" .rdc; do
    one "$prog$v" 2 NVSHMEM_DISABLE_P2P=0 -- "$EX/$prog$v"
    one "$prog$v" 4 NVSHMEM_DISABLE_P2P=0 -- "$EX/$prog$v"
    one "$prog$v" 2 NVSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp -- "$EX/$prog$v"
  done
done
# 8 PEs on the collectives (sharing the GPU under MPS on a one-GPU machine), and 4 through the
# proxy.
one collectives 8 NVSHMEM_DISABLE_P2P=0 -- "$EX/collectives"
one collectives 4 NVSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp -- "$EX/collectives"
for v in "" .rdc; do
  one "plugin$v" 2 NVSHMEM_DISABLE_P2P=0 -- "$EX/plugin_main" "$EX/libplugin$v.so"
  one "plugin$v" 4 NVSHMEM_DISABLE_P2P=0 -- "$EX/plugin_main" "$EX/libplugin$v.so"
  one "plugin$v" 2 NVSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp -- "$EX/plugin_main" "$EX/libplugin$v.so"
done
for pes in 2 4; do
  idf="$(mktemp -u)"
  one uniqueid "$pes" NVSHMEM_DISABLE_P2P=0 -- "$EX/uniqueid" "$idf"
  rm -f "$idf" "$idf.tmp"
done
# torchrun-style: the launcher's variables set by hand (no pshmrun), `per_host` processes per
# host; with 2 emulated hosts (PSHMEM_HOST_ID), a team spans both: members on the same host are
# mapped, the others reached through the proxy (tcp). Like pshmrun, a launcher of such jobs sets
# CUDA_MODULE_LOADING=EAGER (a lazily loaded kernel can deadlock with a kernel waiting on the
# proxy: the runtime warns about it).
envlaunch() { # name nprocs per_host prog
  local name="$1" np="$2" per="$3" prog="$4"
  local port=$((20000 + RANDOM % 20000))
  local secret
  secret="$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  local pids=() outs=() r
  for ((r = 0; r < np; r++)); do
    outs+=("$(mktemp)")
    env RANK=$r WORLD_SIZE="$np" LOCAL_RANK=$((r % per)) LOCAL_WORLD_SIZE="$per" \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PSHMEM_JOB_SECRET="$secret" \
      PSHMEM_HOST_ID="host$((r / per))" PSHMEM_PROVIDER=tcp CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=16 \
      timeout "${EXAMPLES_TIMEOUT:-120}" "$prog" >"${outs[$r]}" 2>&1 &
    pids+=($!)
  done
  local rc=0 p
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  runs=$((runs + 1))
  if [ "$rc" -ne 0 ] || [ "$(cat "${outs[@]}" | grep -c '^OK ')" -ne "$np" ]; then
    fail=$((fail + 1))
    echo "FAILED $name pes=$np, $per per host (environment launch)" | tee -a "$LOG"
    tail -n 20 "${outs[@]}" | tee -a "$LOG"
    sleep 3
  else
    echo "passed $name pes=$np, $per per host (environment launch)" | tee -a "$LOG"
  fi
  rm -f "${outs[@]}"
}
envlaunch ring.rdc 2 2 "$EX/ring.rdc"
envlaunch collectives 4 2 "$EX/collectives"
echo "examples: $((runs - fail)) of $runs runs passed" | tee -a "$LOG"
[ "$fail" -eq 0 ]
