#!/usr/bin/env bash
# Choosing the model on validation (issue 46, item 2): with a validation
# set the epochs score it alone, and the test set is scored once, at the
# end, on the kept model.
#   1. --val-split 0.1 --save-best --tta shift9: metrics.csv leaves every
#      epoch's test fields empty and has val_acc and val_loss; the table
#      heads validation; the final test figure is vit_eval's of best.ckpt
#      with the same scoring (shift9, and one pass for "one pass"); the
#      epoch named is the first best of metrics.csv's val_acc and
#      final.csv's best_epoch; vit_eval names the run's figure for
#      best.ckpt (not for last.ckpt, another model); vit_plot names the
#      figure on best.ckpt; a resume of the finished run keeps final.csv
#      and names the same figure.
#   2. a run logged before 0.3.0 (test figures every epoch, no val_loss)
#      resumes: its rows are kept (val_loss empty), the new ones have no
#      test figures, and vit_plot reads the mixed history.
# Usage: test_valsel.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"
tiny=(--data digits --dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --tta shift9 --lr 0.05)

# ---- 1. --save-best on a validation split ------------------------------------
"$tools/vit_train" "${tiny[@]}" --epochs 3 --val-split 0.1 --save-best --out "$tmp/sb" \
    >"$tmp/sb.txt" 2>&1
rc=$?
grep -vE "^ +[0-9]+ " "$tmp/sb.txt" | sed 's/^/     | /'
csv="$tmp/sb/metrics.csv"
check "exit 0, best.ckpt beside last.ckpt" '[ $rc -eq 0 ] && [ -s "$tmp/sb/best.ckpt" ] && [ -s "$tmp/sb/last.ckpt" ]'
check "metrics.csv: the validation columns last" \
    '[ "$(head -1 "$csv")" = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss" ]'
check "metrics.csv: 3 epochs, no test figure in any, val_acc and val_loss in each" \
    '[ "$(awk -F, '"'"'NR > 1 && NF == 9 && $4 == "" && $5 == "" && $8 != "" && $9 != ""'"'"' "$csv" | wc -l)" -eq 3 ] &&
     [ "$(wc -l <"$csv")" -eq 4 ]'
check "the table heads validation, and shows no test column" \
    'grep -qE "^ *epoch +train loss +acc +val loss +acc +time" "$tmp/sb.txt" && ! grep -qE "test loss|test acc\b" "$tmp/sb.txt"'
re='^test accuracy ([0-9.]+) \(best\.ckpt, epoch ([0-9]+) of 3; tta shift9; one pass ([0-9.]+); chosen on validation\)'
read -r acc best plain < <(sed -nE "s/$re.*/\1 \2 \3/p" "$tmp/sb.txt")
echo "     final: test ${acc:-?} (one pass ${plain:-?}) on best.ckpt of epoch ${best:-?}"
check "the final test line names best.ckpt, its epoch and the scoring" '[ -n "${acc:-}" ]'
# The first epoch whose val_acc is the column's maximum (a tie keeps the earlier).
first_best=$(awk -F, 'NR > 1 && (m == "" || $8 > m) { m = $8; e = $1 } END { print e }' "$csv")
check "its epoch is metrics.csv's first best val_acc ($first_best)" '[ "${best:-x}" = "$first_best" ]'
vplain=$(awk -F, -v e="$first_best" 'NR > 1 && $1 == e { printf "%.4f", $8 }' "$csv")
check "the validation line names the same model, one pass as that row ($vplain)" \
    'grep -qE "^validation accuracy [0-9.]+ \(best\.ckpt, epoch $first_best of 3; tta shift9; one pass $vplain\)$" "$tmp/sb.txt"'
"$tools/vit_eval" "$tmp/sb/best.ckpt" --data digits >"$tmp/ev.txt" 2>&1
"$tools/vit_eval" "$tmp/sb/best.ckpt" --data digits --tta none >"$tmp/ev1.txt" 2>&1
tail -qn 1 "$tmp/ev.txt" "$tmp/ev1.txt" | sed 's/^/     | /'
check "vit_eval best.ckpt (its tta, shift9) gives the final test figure" \
    'grep -qE "^test split: 360 images, loss [0-9.]+, accuracy ${acc:-x} \(tta shift9\)$" "$tmp/ev.txt"'
check "vit_eval best.ckpt --tta none gives its one-pass figure" \
    'grep -qE "^test split: 360 images, loss [0-9.]+, accuracy ${plain:-x}$" "$tmp/ev1.txt"'
check "vit_eval best.ckpt names the run's figure for it, the same" \
    'grep -qx "the run reported test accuracy ${acc:-x} for this model (tta shift9, final.csv)" "$tmp/ev.txt"'
# The run's folder names the model it kept: best.ckpt, said on stderr.
"$tools/vit_eval" "$tmp/sb/" --data digits >"$tmp/evd.txt" 2>"$tmp/evd.err"
check "vit_eval RUN_FOLDER scores best.ckpt, as vit_eval best.ckpt, and says so" \
    'cmp -s "$tmp/evd.txt" "$tmp/ev.txt" && grep -qx "vit_eval: checkpoint $tmp/sb/: best.ckpt, the model the run kept (its last epoch is last.ckpt)" "$tmp/evd.err"'
"$tools/vit_eval" "$tmp/sb/last.ckpt" --data digits >"$tmp/evl.txt" 2>&1
if [ "${best:-3}" -lt 3 ]; then
    check "vit_eval last.ckpt (epoch 3, not the best) claims no reported figure" \
        'grep -q "^test split: 360 images" "$tmp/evl.txt" && ! grep -q "the run reported" "$tmp/evl.txt"'
fi
check "final.csv: best_epoch and the same test figure" \
    '[ "$(awk -F, '"'"'NR == 2 { printf "%d %.4f", $11, $4 }'"'"' "$tmp/sb/final.csv")" = "${best:-x} ${acc:-x}" ]'
"$tools/vit_plot" "$csv" --out "$tmp/sb.png" >"$tmp/plot.txt" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/plot.txt"
check "vit_plot: the last validation figure, the test set scored once" \
    '[ $rc -eq 0 ] && grep -q "3 epochs, last validation accuracy 0\.[0-9]* (one pass); the test set is scored once" "$tmp/plot.txt"'
check "vit_plot: the final test figure on best.ckpt, no best test" \
    'grep -q "final test accuracy ${acc:-x} (tta shift9) on best.ckpt (epoch ${best:-x}), ringed" "$tmp/plot.txt" &&
     ! grep -qi "best test" "$tmp/plot.txt"'

# A resume of the finished run trains nothing, keeps final.csv and says its figure.
cp "$tmp/sb/final.csv" "$tmp/final.before"
"$tools/vit_train" --resume "$tmp/sb/last.ckpt" --threads 1 --save-best >"$tmp/done.txt" 2>&1
rc=$?
grep "^vit_train\|^its" "$tmp/done.txt" | sed 's/^/     | /'
check "resuming the finished run: exit 0, final.csv kept as it was" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/sb/final.csv" "$tmp/final.before"'
check "resuming the finished run: the same test figure, on best.ckpt" \
    'grep -qx "its test accuracy: ${acc:-x} (tta shift9, the model of epoch ${best:-x}$([ "${best:-3}" -lt 3 ] && echo ", best.ckpt"); final.csv)" "$tmp/done.txt"'

# ---- 2. resuming a run logged before 0.3.0 -------------------------------------
"$tools/vit_train" "${tiny[@]}" --epochs 3 --val-split 0.1 --save-best --stop-after 2 \
    --out "$tmp/old" >"$tmp/old.txt" 2>&1
# Its history as 0.2 wrote it: test figures every epoch, val_acc last.
awk -F, 'BEGIN { OFS = "," }
         NR == 1 { print "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc"; next }
         { print $1, $2, $3, "1.500000", "0.500000", $6, $7, $8 }' "$tmp/old/metrics.csv" \
    >"$tmp/old/m.csv" && mv "$tmp/old/m.csv" "$tmp/old/metrics.csv"
sed 's/^/     | old: /' "$tmp/old/metrics.csv"
"$tools/vit_train" --resume "$tmp/old/last.ckpt" --threads 1 --save-best >"$tmp/re.txt" 2>&1
rc=$?
grep -E "^vit_train|^test|^valid" "$tmp/re.txt" | sed 's/^/     | /'
sed 's/^/     | new: /' "$tmp/old/metrics.csv"
check "the old run resumes (exit 0) to epoch 3" '[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/old/metrics.csv")" -eq 4 ]'
check "its rows are kept, val_loss empty; the new row has no test figure" \
    '[ "$(head -1 "$tmp/old/metrics.csv")" = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss" ] &&
     [ "$(awk -F, '"'"'NR > 1 && NR < 4 && NF == 9 && $4 == "1.500000" && $9 == ""'"'"' "$tmp/old/metrics.csv" | wc -l)" -eq 2 ] &&
     [ "$(awk -F, '"'"'NR == 4 && NF == 9 && $4 == "" && $5 == "" && $9 != ""'"'"' "$tmp/old/metrics.csv" | wc -l)" -eq 1 ]'
"$tools/vit_plot" "$tmp/old/metrics.csv" --out "$tmp/old.png" >"$tmp/oplot.txt" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/oplot.txt"
check "vit_plot reads the mixed history" '[ $rc -eq 0 ] && [ -s "$tmp/old.png" ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
