#!/bin/sh
# Every example .gr gives the same fetched values, bit for bit, on one device
# and spread over 3 devices (round-robin: every graph really is split, also
# with recv scheduling; and placed by the cost-model placer). Values are compared as printed by --json
# (f32 with 9 significant digits: exact).
#   check_spread.sh GRAPHRUN EXAMPLES_DIR
set -u
gr=$1
ex=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '1,2,3\n3, 4, 5\n' > "$tmp/cm.csv"
labels=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
fail=0
n=0
check() {
  name=$1
  shift
  "$gr" run "$@" --json --quiet > "$tmp/one" 2>"$tmp/err" || { echo "FAIL $name (1 device): $(cat "$tmp/err")"; fail=1; return; }
  for p in round-robin cost "round-robin --schedule-recvs"; do
    # shellcheck disable=SC2086 # $p is the placement and its extra flag
    "$gr" run "$@" --json --quiet --devices 3 --placement $p > "$tmp/three" 2>"$tmp/err" ||
      { echo "FAIL $name ($p): $(cat "$tmp/err")"; fail=1; continue; }
    if cmp -s "$tmp/one" "$tmp/three"; then
      n=$((n + 1))
    else
      echo "FAIL $name ($p): $(cat "$tmp/three") differs from one device: $(cat "$tmp/one")"
      fail=1
    fi
  done
}
check basics "$ex/basics.gr"
check control_flow "$ex/control_flow.gr"
check defs "$ex/defs.gr"
check mlp_forward "$ex/mlp_forward.gr"
check scopes "$ex/scopes.gr"
check linear_regression "$ex/linear_regression.gr" --steps 40
check rnn "$ex/rnn.gr" --steps 20
check column_means "$ex/column_means.gr" --feed x="$tmp/cm.csv"
check label_counts "$ex/label_counts.gr" --feed labels="$labels"
check fashion_mlp "$ex/fashion_mlp.gr" --steps 20 --eval accuracy
# a step trace: one complete event per node run, every device named
"$gr" run "$ex/rnn.gr" --steps 2 --quiet --devices 3 --placement round-robin \
  --trace "$tmp/trace.json" > /dev/null 2>"$tmp/err" || { echo "FAIL trace: $(cat "$tmp/err")"; fail=1; }
runs=$(grep -o '"ph": "X"' "$tmp/trace.json" | wc -l)
devs=$(grep -o '"name": "process_name"' "$tmp/trace.json" | wc -l)
if [ "$runs" -lt 100 ] || [ "$devs" != 3 ]; then
  echo "FAIL trace: $runs node runs on $devs devices"
  fail=1
fi
[ $fail = 0 ] && echo "spread over 3 devices: $n runs equal one device bit for bit; trace ok"
exit $fail
