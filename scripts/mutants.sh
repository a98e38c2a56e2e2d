#!/usr/bin/env bash
# Mutation checks of the proxy's ordering on unordered fabrics: each mutant breaks one rule on
# purpose and names the test that must then fail. The script applies a mutant to a clean file,
# runs its test (expecting a failure), restores the file, and reports each as caught or MISSED;
# it exits non-zero if any was missed. Not part of CI (each mutant costs a release rebuild).
# Usage: scripts/mutants.sh [NAME...]   (default: every mutant; see the table below)
set -uo pipefail
cd "$(dirname "$0")/.."

# name | file | text | replacement | test command
MUTANTS=(
  "early-signal|proxy/src/wire.rs|RequestKind::Fence { expect } => expect,|RequestKind::Fence { expect } => expect.saturating_sub(1),|cargo test --release -q -p pshmem-tests --test efa the_proxy_paths"
  "mark-waits-for-nothing|proxy/src/engine/fence.rs|marks.push((pe, peer.tags.close(ring, Round::Epoch)));|marks.push((pe, None));|cargo test --release -q -p pshmem-proxy --lib fence"
  "amo-unsequenced|proxy/src/engine/issue.rs|let seq = self.mode == SignalMode::Tagged;|let seq = false;|cargo test --release -q -p pshmem-proxy --lib fence"
  "write-passes-fence|proxy/src/engine/fence.rs|        if q.fenced {|        if false \&\& q.fenced {|cargo test --release -q -p pshmem-proxy --lib fence"
  "signals-unordered|proxy/src/engine/accept.rs|            sequenced: self.mode == SignalMode::Tagged,|            sequenced: false,|cargo test --release -q -p pshmem-tests --test efa the_proxy_paths"
  "tag-reuse-before-ack|proxy/src/engine/tags.rs|        self.writes.remove(&id);|        self.writes.remove(&id);\n        self.live.remove(&id);|cargo test --release -q -p pshmem-proxy --lib tags"
  "count-duplicates|proxy/src/engine/complete.rs|if !ring.done.is_pending(seq) {|if false \&\& !ring.done.is_pending(seq) {|cargo test --release -q -p pshmem-tests --test efa the_proxy_paths"
  "held-payload-not-copied|transport/src/ofi/more.rs|        if len > self.caps.inject_size {|        if len > 0 {|cargo test --release -q -p pshmem-tests --test runtime doorbell"
)

want=" $* "
missed=0
for m in "${MUTANTS[@]}"; do
  IFS='|' read -r name file from to test <<< "$m"
  [ $# -eq 0 ] || [[ "$want" == *" $name "* ]] || continue
  if ! git diff --quiet -- "$file"; then
    echo "SKIP $name: $file has uncommitted changes"
    continue
  fi
  python3 - "$file" "$from" "$to" <<'PY' || { echo "MISSED $name: the text to mutate is gone"; missed=1; continue; }
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3].replace("\\n", "\n").replace("\\&", "&")
s = open(path).read()
if old not in s:
    sys.exit(1)
open(path, "w").write(s.replace(old, new))
PY
  echo "== $name: $test"
  if $test > "target/mutant-$name.log" 2>&1; then
    echo "MISSED $name: the test passed with the mutant (log: target/mutant-$name.log)"
    missed=1
  else
    echo "caught $name"
  fi
  git checkout -q -- "$file"
done
exit "$missed"
