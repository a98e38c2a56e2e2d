#!/usr/bin/env bash
# An unprivileged local user attacks running jobs (testbin `attack`, as uid 65534 through
# setpriv, so run this as root): libfabric tcp endpoints with guessed registration keys,
# simulated NICs without the job's token, and bootstrap ports with a wrong secret, while JOBS
# jobs of 2 PEs per path (tcp through the proxy, the simulated fabric) run and verify every
# byte they move. Passes when every job succeeded, every path was reached, and the attacker
# got nothing (0 bytes read, 0 answers). Writes a JSON summary.
# Usage: scripts/attack.sh [JOBS] [OUT_JSON]   (defaults: 20, attack.json)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${1:-20}"
OUT="$(realpath -m "${2:-attack.json}")"
if [ "$(id -u)" != 0 ]; then
  echo "attack.sh: run as root (the attacker runs as uid 65534 through setpriv)" >&2
  exit 2
fi
bash scripts/setup.sh
cargo build --release --quiet -p pshmem-tests -p pshmem-tools
DIR="$(mktemp -d)"
trap 'touch "$DIR/stop"; rm -rf "$DIR"' EXIT
chmod 755 "$DIR"
install -m 755 target/release/pshmem-testbin "$DIR/attacker"
fail=0
rows=()
for path in tcp sim; do
  rm -f "$DIR/stop"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$DIR/attacker" attack --seconds 3600 \
    --stop-file "$DIR/stop" > "$DIR/$path.out" 2>&1 &
  apid=$!
  ok=0
  for _ in $(seq "$JOBS"); do
    if PSHMEM_PROVIDER=$path PSHMEM_DISABLE_P2P=1 timeout 120 target/release/pshmrun -n 2 -- \
        target/release/pshmem-testbin rt-ops --sizes 8,4096,65536 --rounds 1000 > "$DIR/job.log" 2>&1; then
      ok=$((ok + 1))
    else
      tail -5 "$DIR/job.log" >&2
    fi
  done
  touch "$DIR/stop"
  wait "$apid" || true
  line="$(grep '^ATTACK' "$DIR/$path.out" || echo 'ATTACK none')"
  echo "$path: $ok/$JOBS jobs passed; $line"
  f() { local v; v="$(sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<< "$line")"; echo "${v:-0}"; }
  att=$([ "$path" = tcp ] && f tcp_attempts || f sim_attempts)
  got=$(( $(f tcp_got) + $(f sim_got) + $(f bs_got) ))
  [ "$ok" = "$JOBS" ] && [ "${att:-0}" -gt 0 ] && [ "$got" = 0 ] || fail=1
  rows+=("{\"path\":\"$path\",\"jobs\":$JOBS,\"passed\":$ok,\"attempts\":${att:-0},\"bootstrap_attempts\":$(f bs_attempts),\"got\":$got}")
done
(IFS=,; echo "{\"attacks\":[${rows[*]}]}") > "$OUT"
echo "attack.sh: summary in $OUT"
exit "$fail"
