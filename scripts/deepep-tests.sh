#!/usr/bin/env bash
# DeepEP V1's own test programs (test_low_latency.py, test_intranode.py and their utils.py, from
# a DeepEP checkout: they are not part of this repository) run unmodified against pshmem, with
# pshmem.deep_ep installed as `deep_ep` into a temporary folder (never over a real DeepEP).
# Usage: scripts/deepep-tests.sh DEEPEP_TESTS_DIR OUT_DIR [ll] [intranode]
#   NS="2 4": the process counts (default 2 and every GPU); LL_TIMEOUT / HT_TIMEOUT (s, 200);
#   SHOW: lines of each log printed (12). test_intranode.py spawns 8 processes in its own
#   __main__; here its test_loop is spawned with each count of NS instead.
# Needs a GPU machine with torch and the pshmem wheel installed (`python3 -m pip install`).
set -u
TESTS=$(cd "$1" && pwd); O=$2; shift 2; PARTS=${*:-"ll intranode"}
mkdir -p "$O"; O=$(cd "$O" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SHIM=$(mktemp -d); trap 'rm -rf "$SHIM"' EXIT
python3 -m pshmem.deep_ep install --target "$SHIM" || exit 1
export PYTHONPATH=$SHIM:$TESTS
cd "$TESTS"
NG=$(nvidia-smi -L | wc -l)
port=8361 fail=0
for part in $PARTS; do
  for n in $(echo ${NS:-2 $NG} | tr ' ' '\n' | sort -un); do
    port=$((port + 7)); export MASTER_PORT=$port  # a fresh rendezvous port per run
    log="$O/$part-$n.log" start=$(date +%s)
    case $part in
      ll) timeout "${LL_TIMEOUT:-200}" python3 test_low_latency.py --num-processes "$n" >"$log" 2>&1 ;;
      intranode) timeout "${HT_TIMEOUT:-200}" python3 -c "import torch.multiprocessing as mp, \
test_intranode as t; mp.spawn(t.test_loop, args=($n,), nprocs=$n)" >"$log" 2>&1 ;;
      *) echo "deepep-tests: no part $part (ll, intranode)"; exit 2 ;;
    esac
    rc=$?; [ $rc = 0 ] || fail=1
    echo "== $part, $n processes: rc=$rc in $(($(date +%s) - start)) s ($log)"
    grep -E "Error|Traceback|passed|bandwidth|Best|send/recv" "$log" | head -"${SHOW:-12}"
  done
done
exit $fail
