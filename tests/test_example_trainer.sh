#!/usr/bin/env bash
# examples/example_trainer (early stopping in a trainer callback): what it
# prints agrees with the run's metrics.csv, row by row; a stop came exactly
# PATIENCE epochs after the best validation accuracy, which is the best of
# the val_acc column; the checkpoint holds the epoch it stopped at; the
# epochs did not score the test set (metrics.csv's test fields are empty);
# and the test accuracy it computes itself, once, is vit_eval's of the
# checkpoint.
# Usage: test_example_trainer.sh EXAMPLE DIGITS_CSV VIT_EVAL
set -u
example=$1 digits=$2 vit_eval=$3
. "$(dirname "$0")/check.sh"

"$example" "$digits" "$tmp/run" 2 >"$tmp/out" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/out" | tail -5
check "exits 0" '[ $rc -eq 0 ]'
csv="$tmp/run/metrics.csv"
rows=$(($(wc -l <"$csv") - 1))
printed=$(grep -c '^epoch [0-9]*: ' "$tmp/out")
check "one line per metrics.csv row ($printed, $rows)" '[ "$printed" -eq "$rows" ] && [ "$rows" -ge 3 ]'
# val loss (column 9) and val acc (column 8), as printed to 4 decimals.
want=$(awk -F, 'NR > 1 { printf "epoch %d: val loss %.4f, val acc %.4f\n", $1, $9, $8 }' "$csv")
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
check "no epoch scored the test set (test_loss, test_acc empty)" \
    '[ "$(awk -F, '"'"'NR > 1 && ($4 != "" || $5 != "")'"'"' "$csv" | wc -l)" -eq 0 ]'
"$vit_eval" "$tmp/run/last.ckpt" --data digits --tta none >"$tmp/eval" 2>&1
last=$(sed -n 's/^test split: 360 images, loss [0-9.]*, accuracy \([0-9.]*\)$/\1/p' "$tmp/eval")
tail -1 "$tmp/eval" | sed 's/^/     | /'
check "its own test score is vit_eval's of last.ckpt ($last)" \
    "[ -n '$last' ] && grep -q '^test accuracy $last after $rows epochs; checkpoint $tmp/run/last.ckpt\$' '$tmp/out'"
check "the checkpoint exists" '[ -s "$tmp/run/last.ckpt" ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
