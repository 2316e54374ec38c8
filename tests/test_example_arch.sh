#!/usr/bin/env bash
# examples/example_arch (a user's own architecture, registered and trained
# by vit_trainer): it learns the digits well above chance (10%), its
# metrics.csv has a row per epoch, the checkpoint records the architecture
# and its keys, a run stopped after 5 epochs and resumed ends bitwise
# equal (checkpoint and metrics) to one that ran straight through, and it
# trains in bf16 too.
# Usage: test_example_arch.sh EXAMPLE DIGITS_CSV
set -u
example=$1 digits=$2
. "$(dirname "$0")/check.sh"
epochs=12

"$example" "$digits" "$tmp/a" $epochs >"$tmp/out" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/out" | tail -3
check "exits 0" '[ $rc -eq 0 ]'
acc=$(sed -n 's/^convmlp: [0-9]* parameters, test accuracy \([0-9.]*\) .*/\1/p' "$tmp/out")
check "test accuracy well above chance ($acc > 0.6)" "awk -v a='${acc:-0}' 'BEGIN { exit !(a > 0.6) }'"
rows=$(($(wc -l <"$tmp/a/metrics.csv") - 1))
check "metrics.csv: one row per epoch ($rows)" "[ $rows -eq $epochs ]"
check "the checkpoint records the architecture and its keys" \
    "grep -a -q 'arch = convmlp' '$tmp/a/last.ckpt' && grep -a -q 'width1 = 16' '$tmp/a/last.ckpt'"

"$example" "$digits" "$tmp/b" $epochs --stop-after 5 >"$tmp/out2" 2>&1
check "stops after epoch 5" "[ $? -eq 0 ] && grep -q '^stopped after epoch 5;' '$tmp/out2'"
"$example" "$digits" "$tmp/b" $epochs --resume >"$tmp/out3" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/out3" | tail -2
check "the resume exits 0" '[ $rc -eq 0 ]'
check "resumed: checkpoint bitwise the straight run's" 'cmp -s "$tmp/a/last.ckpt" "$tmp/b/last.ckpt"'
cols() { cut -d, -f1-5 "$1"; } # epoch, losses and accuracies (not the times)
check "resumed: metrics rows the straight run's" 'diff <(cols "$tmp/a/metrics.csv") <(cols "$tmp/b/metrics.csv")'
# bf16 through convmlp's bf16_weights hook (examples/convmlp.c): it trains
# and learns as well; the final line says which precision ran (fp32 where
# the CPU or build has no bf16: the recipe's fallback), and the
# checkpoint's recipe records the precision asked for.
"$example" "$digits" "$tmp/c" $epochs --precision bf16 >"$tmp/out4" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/out4" | tail -1
check "bf16: exits 0" '[ $rc -eq 0 ]'
acc=$(sed -n 's/^convmlp: [0-9]* parameters, test accuracy \([0-9.]*\) .*, trained in \(bf16\|fp32\)$/\1/p' "$tmp/out4")
check "bf16: test accuracy well above chance ($acc > 0.6)" "awk -v a='${acc:-0}' 'BEGIN { exit !(a > 0.6) }'"
check "bf16: the checkpoint records precision = bf16" "grep -a -q 'precision = bf16' '$tmp/c/last.ckpt'"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
