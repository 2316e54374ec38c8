#!/usr/bin/env bash
# A checkpoint knows its data (issue: tools that fell back to the digits):
#   1. a run on a data set of its own (vit_make_data rgb32, 32x32 RGB PNG
#      folders) records it: vit_eval, vit_export --logits and vit_attn
#      without --data, from another folder, use that data and agree with
#      the same calls given --data; vit_train --resume without --data
#      continues on it;
#   2. resuming on another data set of the same shape is refused with one
#      line naming both and --other-data; with --other-data it trains, and
#      the step-based schedule ends where the new steps end (the last
#      epoch's learning rate is the schedule's last, not one past its end).
# Usage: test_run_data.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"

"$tools/vit_make_data" rgb32 "$tmp/a" --count 96 --seed 1 >/dev/null || bad "make data a"
"$tools/vit_make_data" rgb32 "$tmp/b" --count 112 --seed 2 >/dev/null || bad "make data b"
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --patch 8 --batch 16 --threads 1 --quiet --tta none
       --warmup 0)
train() { "$tools/vit_train" "${small[@]}" "$@"; }

# ---- 1. the tools find the run's data --------------------------------------
train --data "$tmp/a" --epochs 2 --stop-after 1 --out "$tmp/run" >/dev/null 2>&1
check "a run on its own data: checkpoint written" '[ -s "$tmp/run/last.ckpt" ]'
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere" || exit 1
given=$("$tools/vit_eval" "$tmp/run/last.ckpt" --data "$tmp/a" 2>&1 | grep accuracy)
own=$("$tools/vit_eval" "$tmp/run/last.ckpt" 2>&1)
rc=$?
echo "     vit_eval without --data: $(grep accuracy <<<"$own")"
check "vit_eval without --data: exit 0, the same figures as with --data" \
    '[ $rc -eq 0 ] && [ -n "$given" ] && [ "$(grep accuracy <<<"$own")" = "$given" ]'
"$tools/vit_export" "$tmp/run/last.ckpt" --out m1.safetensors --logits l1.csv >/dev/null 2>&1
rc1=$?
"$tools/vit_export" "$tmp/run/last.ckpt" --out m2.safetensors --logits l2.csv --data "$tmp/a" \
    >/dev/null 2>&1
check "vit_export --logits without --data: the run's test images" \
    '[ $rc1 -eq 0 ] && cmp -s l1.csv l2.csv && [ "$(($(wc -l <l1.csv) - 1))" -eq 24 ]'
"$tools/vit_attn" "$tmp/run/last.ckpt" --digit 3 --out att.png >/dev/null 2>&1
check "vit_attn --digit without --data: exit 0 on the run's 32x32 images" '[ $? -eq 0 ] && [ -s att.png ]'
out=$("$tools/vit_train" --threads 1 --quiet --resume "$tmp/run/last.ckpt" 2>&1)
rc=$?
check "vit_train --resume without --data: continues on the run's data" \
    '[ $rc -eq 0 ] && grep -q "^2," "$tmp/run/metrics.csv"'
# vit_export --logits on data the model cannot take: refused before
# anything is written (it used to write the safetensors file first).
err=$("$tools/vit_export" "$tmp/run/last.ckpt" --out m3.safetensors --logits l3.csv --data digits 2>&1)
rc=$?
echo "     stderr: $err"
check "vit_export --logits, wrong --data: exit 1, one line naming both shapes, nothing written" \
    '[ $rc -eq 1 ] && [ "$err" = "vit_export: --logits: the test split of digits has 360 images of 8x8x1; the model takes 32x32x3 (height x width x channels); nothing written" ] &&
     [ ! -e m3.safetensors ] && [ ! -e l3.csv ] && [ -z "$(ls -A | grep -v -e "^m[12]" -e "^l[12]" -e "^att.png$")" ]'
# A run with tta shift9: final.csv beside metrics.csv holds the figure it
# reported, vit_plot rings it, and vit_export says its weights are one
# pass while that figure was tta's, in its output and its metadata.
train --data "$tmp/a" --epochs 1 --tta shift9 --out "$tmp/tta" >"$tmp/tta.out" 2>&1
reported=$(sed -n 's/^test accuracy \([0-9.]*\) (tta shift9.*/\1/p' "$tmp/tta.out")
row=$(tail -n 1 "$tmp/tta/final.csv" 2>/dev/null)
echo "     final.csv: $(head -n 1 "$tmp/tta/final.csv" 2>/dev/null) / $row"
check "tta run: final.csv has the reported $reported with tta 1, the epoch and the one-pass figure" \
    '[ -n "$reported" ] && [ "$(head -n 1 "$tmp/tta/final.csv")" = "epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,test_loss_one_pass,seconds" ] &&
     awk -F, -v r="$reported" "{ exit !(\$1 == 1 && sprintf(\"%.4f\", \$4) == r && \$5 == 1) }" <<<"$row" &&
     [ "$(awk -F, "NR == 2 { printf \"%.6f\", \$5 }" "$tmp/tta/metrics.csv")" = "$(cut -d, -f7 <<<"$row")" ]'
check "tta run: final.csv's seconds (the time to its figure) at or after the last epoch's, under a minute" \
    'awk -F, -v e="$(awk -F, "NR == 2 { print \$7 }" "$tmp/tta/metrics.csv")" \
         "{ exit !(e > 0 && \$9 >= e && \$9 < 60) }" <<<"$row"'
plot=$("$tools/vit_plot" "$tmp/tta/metrics.csv" --out tta.png 2>&1)
check "vit_plot on it: the final figure ringed" \
    'grep -qx "$tmp/tta/final.csv: final test accuracy $reported (tta shift9), ringed" <<<"$plot"'
exp=$("$tools/vit_export" "$tmp/tta/last.ckpt" --out tta.safetensors 2>&1)
rc=$?
echo "$exp" | sed 's/^/     | /'
check "vit_export of a tta model: says the weights are one pass and the run's $reported was tta shift9" \
    '[ $rc -eq 0 ] && grep -qx "note: these weights give one pass per image (as --logits and metrics.csv.s epochs);" <<<"$exp" &&
     grep -q "^the run.s final test accuracy ($reported) was scored with tta shift9, the mean softmax over the image and its 8 one-pixel shifts" <<<"$exp"'
check "vit_export of a tta model: the metadata says so too (tta_note), a one-pass model's does not" \
    'head -c 4096 tta.safetensors | grep -aq "\"tta_note\":\"these weights give one pass per image" &&
     ! head -c 4096 m1.safetensors | grep -aq tta_note'
cd "$tmp" || exit 1

# ---- 2. other data ------------------------------------------------------------
cp -r "$tmp/run" "$tmp/keep"
err=$("$tools/vit_train" --threads 1 --quiet --resume "$tmp/run/last.ckpt" --epochs 4 \
      --data "$tmp/b" 2>&1 >/dev/null)
rc=$?
echo "     stderr: $err"
check "resume on other data: refused, one line naming both data sets and --other-data" \
    '[ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -qF "$tmp/a" <<<"$err" && grep -qF "'$tmp/b'" <<<"$err" && grep -q "96 train" <<<"$err" && grep -q "112 train" <<<"$err" && grep -q -- "--other-data" <<<"$err"'
check "refused: the run untouched" 'cmp -s "$tmp/run/last.ckpt" "$tmp/keep/last.ckpt"'
"$tools/vit_train" --threads 1 --quiet --resume "$tmp/run/last.ckpt" --epochs 4 --data "$tmp/b" \
    --other-data >/dev/null 2>&1
rc=$?
# 2 epochs of 96 images (6 steps each) were done; 2 more of 112 (7 steps
# each): the schedule's end is step 26, so epoch 4's last rate is
# vit_lr_at(25, 26, 0, 0.002, 1e-5) = min + (peak - min)(1 + cos(25 pi / 26)) / 2.
want=$(awk 'BEGIN { printf "%.6e", 1e-5 + (0.002 - 1e-5) * (1 + cos(25 * 3.141592653589793 / 26)) / 2 }')
got=$(awk -F, '$1 == 4 { printf "%.6e", $6 }' "$tmp/run/metrics.csv")
check "with --other-data: trains epochs 3-4, the schedule ending with the new steps ($got, $want)" \
    '[ $rc -eq 0 ] && [ "$got" = "$want" ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
