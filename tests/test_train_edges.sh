#!/usr/bin/env bash
# vit_train at the edges of a run, and choosing the model on validation:
#   1. --lr 5 diverges: the run stops early (exit 1) naming the
#      divergence, keeps the last good checkpoint and suggests a lower
#      --lr, instead of training every epoch at chance;
#   2. an option error (--patch 3 on 8x8 images) is reported before the
#      output folder's "already holds a run";
#   3. --help and a refused resume say the same about what a resume may
#      change;
#   4. --save-best --val-split: best.ckpt beside last.ckpt, the epoch table
#      shows validation (no test column), the test figure names the model
#      and is scored once; --save-best without a validation set is refused;
#   5. --early-stop N ends a run whose validation accuracy stops improving,
#      and the command it prints resumes it.
# Usage: test_train_edges.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"
tiny=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --tta none)

# ---- 1. divergence ---------------------------------------------------------
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 30 --lr 5 --warmup 3 --out "$tmp/lr" \
    >"$tmp/lr.txt" 2>&1
rc=$?
grep "^vit_train:" "$tmp/lr.txt"
rows=$(($(wc -l <"$tmp/lr/metrics.csv") - 1))
check "--lr 5: exit 1" '[ $rc -eq 1 ]'
check "--lr 5: said to diverge" 'grep -q "^vit_train: training diverged by step [0-9]*: epoch [0-9]*.s mean loss is" "$tmp/lr.txt"'
check "--lr 5: stopped early ($rows of 30 epochs)" '[ "$rows" -lt 30 ]'
check "--lr 5: a lower --lr suggested" 'grep -q "learning rate 5 is likely too high.*--lr 0.5" "$tmp/lr.txt"'
if [ -e "$tmp/lr/last.ckpt" ]; then
    check "--lr 5: the kept checkpoint is named" 'grep -q "the last good checkpoint is kept: $tmp/lr/last.ckpt" "$tmp/lr.txt"'
else
    check "--lr 5: no checkpoint, said so" 'grep -q "diverged before its first checkpoint" "$tmp/lr.txt"'
fi

# ---- 2. option errors first -------------------------------------------------
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 1 --out "$tmp/run" >/dev/null 2>&1
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 1 --patch 3 --out "$tmp/run" \
    >"$tmp/p3.txt" 2>&1
rc=$?
cat "$tmp/p3.txt"
check "--patch 3 into a used folder: refused" '[ $rc -ne 0 ]'
check "--patch 3: the patch is the error named" 'grep -q "patch" "$tmp/p3.txt" && ! grep -q "already holds a run" "$tmp/p3.txt"'

# ---- 3. one statement of what a resume may change ---------------------------
"$tools/vit_train" --help >"$tmp/help.txt"
"$tools/vit_train" --resume "$tmp/run/last.ckpt" --dim 32 --epochs 2 >"$tmp/re.txt" 2>&1
rc=$?
stmt="only epochs, ckpt_minutes and precision may change"
check "a resume that changes dim is refused" '[ $rc -ne 0 ] && grep -q "dim = 16, this run asks for 32" "$tmp/re.txt"'
check "the refusal says what may change" 'grep -qF "$stmt" "$tmp/re.txt"'
check "--help says the same" 'grep -qF "$stmt" "$tmp/help.txt"'

# ---- 4. --save-best ---------------------------------------------------------------
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 4 --save-best --out "$tmp/nb" \
    >"$tmp/nb.txt" 2>&1
rc=$?
check "--save-best without a validation set: refused" '[ $rc -ne 0 ] && grep -q "save_best chooses by the validation score" "$tmp/nb.txt"'
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 4 --lr 0.02 --save-best --val-split 0.1 \
    --out "$tmp/sb" >"$tmp/sb.txt" 2>&1
rc=$?
grep -vE "^ +[0-9]+ " "$tmp/sb.txt"
check "--save-best: exit 0" '[ $rc -eq 0 ]'
check "--save-best: best.ckpt beside last.ckpt" '[ -s "$tmp/sb/best.ckpt" ] && [ -s "$tmp/sb/last.ckpt" ]'
check "--save-best: the table shows validation, no test column" 'grep -qE "^ *epoch +train loss +acc +val loss +acc" "$tmp/sb.txt" && ! grep -q "test loss" "$tmp/sb.txt"'
check "--save-best: the test figure names best.ckpt and is scored once" 'grep -qE "^test accuracy [0-9.]+ \(best.ckpt, epoch [1-4] of 4; the test set scored once" "$tmp/sb.txt"'
check "--save-best: the validation figure names it too" 'grep -qE "^validation accuracy [0-9.]+ \(best.ckpt, epoch [1-4] of 4\)" "$tmp/sb.txt"'
check "--save-best: the checkpoint named is best.ckpt" 'grep -q "checkpoint $tmp/sb/best.ckpt" "$tmp/sb.txt"'

# ---- 5. --early-stop --------------------------------------------------------
# A rate too small to move a weight: epoch 1's validation accuracy is
# never beaten, and a patience of 2 ends the run after epoch 3.
"$tools/vit_train" --data digits "${tiny[@]}" --epochs 20 --lr 1e-12 --min-lr 0 --val 300 \
    --early-stop 2 --stop-after 2 --out "$tmp/es" >"$tmp/es.txt" 2>&1
cmd=$(grep -A1 "continue with:" "$tmp/es.txt" | tail -1 | sed -E 's/^vit_train: continue with: //; s/^ +//')
check "--early-stop: the resume command keeps it" 'echo "$cmd" | grep -q -- "--val 300 --early-stop 2"'
"$tools/vit_train" --resume "$tmp/es/last.ckpt" --threads 1 --val 300 --early-stop 2 \
    >"$tmp/es2.txt" 2>&1
rc=$?
rows=$(($(wc -l <"$tmp/es/metrics.csv") - 1))
grep -E "^early|^test" "$tmp/es2.txt"
check "--early-stop: exit 0" '[ $rc -eq 0 ]'
check "--early-stop: resumed, it remembers epoch 1 and stops after epoch 3 ($rows rows)" '[ "$rows" = 3 ] && grep -q "^early stop: no better validation accuracy in the 2 epochs after epoch 1" "$tmp/es2.txt"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
