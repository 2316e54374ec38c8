#!/usr/bin/env bash
# examples/example_trainer (early stopping in a trainer callback): what it
# prints agrees with the run's metrics.csv, row by row; a stop came exactly
# PATIENCE epochs after the best validation accuracy, which is the best of
# the val_acc column; the checkpoint holds the epoch it stopped at; and the
# test accuracy it computes itself equals the last row's.
# Usage: test_example_trainer.sh EXAMPLE DIGITS_CSV
set -u
example=$1 digits=$2
. "$(dirname "$0")/check.sh"

"$example" "$digits" "$tmp/run" 2 >"$tmp/out" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/out" | tail -5
check "exits 0" '[ $rc -eq 0 ]'
csv="$tmp/run/metrics.csv"
rows=$(($(wc -l <"$csv") - 1))
printed=$(grep -c '^epoch [0-9]*: ' "$tmp/out")
check "one line per metrics.csv row ($printed, $rows)" '[ "$printed" -eq "$rows" ] && [ "$rows" -ge 3 ]'
# val acc (column 8) and test acc (column 5), as printed to 4 decimals.
want=$(awk -F, 'NR > 1 { printf "epoch %d: val acc %.4f, test acc %.4f\n", $1, $8, $5 }' "$csv")
got=$(sed -n 's/^\(epoch [0-9]*: \)train loss [0-9.]*, \(.*\)$/\1\2/p' "$tmp/out")
check "printed figures are the rows'" '[ "$want" = "$got" ]'
if grep -q '^stopped after epoch' "$tmp/out"; then
    read -r stop best best_epoch < <(sed -n 's/^stopped after epoch \([0-9]*\): best val acc \([0-9.]*\) at epoch \([0-9]*\)$/\1 \2 \3/p' "$tmp/out")
    max=$(awk -F, 'NR > 1 && $8 > m { m = $8 } END { printf "%.4f", m }' "$csv")
    check "stopped at the last row, 2 epochs after the best ($stop, $best_epoch)" \
        '[ "$stop" -eq "$rows" ] && [ $((stop - best_epoch)) -eq 2 ] && [ "$stop" -lt 40 ]'
    check "the best is the val_acc column's maximum ($best, $max)" '[ "$best" = "$max" ]'
else
    check "without a stop, all 40 epochs ran" '[ "$rows" -eq 40 ]'
fi
last=$(awk -F, 'END { printf "%.4f", $5 }' "$csv")
check "its own test score equals the last row's ($last)" \
    "grep -q '^test accuracy $last after $rows epochs; checkpoint $tmp/run/last.ckpt\$' '$tmp/out'"
check "the checkpoint exists" '[ -s "$tmp/run/last.ckpt" ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
