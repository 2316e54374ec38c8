#!/usr/bin/env bash
# A folder of class folders without train/ and test/ (issue 23, item 4):
#   1. vit_train splits it by --val-split/--test-split/--split-seed, says
#      the default (a fifth for testing) in one line when no --test-split
#      is given, and records the split in the checkpoint;
#   2. a run interrupted and resumed without split flags ends exactly where
#      the uninterrupted run ends (the same split, so the same figures);
#   3. vit_eval without --data (and with --data naming the folder another
#      way) scores the same test images the run held out;
#   4. a resume with other split flags is refused in one line naming both.
# The images are PNGs vit_make_data writes, moved into one folder per class.
# Usage: test_data_split.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"

"$tools/vit_make_data" rgb32 "$tmp/made" --count 80 --seed 3 >/dev/null || bad "make data"
for half in train test; do
    for c in "$tmp/made/$half"/*; do
        mkdir -p "$tmp/flat/${c##*/}"
        for f in "$c"/*.png; do mv "$f" "$tmp/flat/${c##*/}/$half-${f##*/}"; done
    done
done
total=$(find "$tmp/flat" -name '*.png' | wc -l)
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --patch 8 --batch 16 --threads 1 --tta none
       --warmup 0)
train() { "$tools/vit_train" "${small[@]}" "$@"; }
acc() { grep accuracy <<<"$1"; }

# ---- 1. the default and a given split ------------------------------------------
out=$(train --data "$tmp/flat" --epochs 1 --out "$tmp/default" 2>&1)
echo "     $(grep '^split' <<<"$out")"
check "no --test-split: one line saying the default, a fifth of each class" \
    '[ "$(grep -c "^split: .*flat has no train/ and test/: 20% of each class held out for testing (--test-split 0.2, --split-seed 0)" <<<"$out")" -eq 1 ]'
# The rule by hand: floor(0.2 n + 0.5) of each class of n images (at least
# one, every class here having 2 or more).
want=$(for c in "$tmp/flat"/*; do ls "$c" | wc -l; done |
       awk '{ t = int(0.2 * $1 + 0.5); s += t < 1 ? 1 : t } END { print s }')
check "the default split: $((total - want)) train, $want test of $total images" \
    'grep -q "^data: $((total - want)) train, $want test images" <<<"$out"'

# Classes of 13 7 10 9 8 13 10 8 10 12 images: 30 test (0.3 n rounded) and
# 10 val (one of each).
split=(--val-split 0.1 --test-split 0.3 --split-seed 5)
out=$(train --data "$tmp/flat" "${split[@]}" --epochs 2 --out "$tmp/whole" 2>&1)
check "--val-split 0.1 --test-split 0.3: 60 train, 10 val, 30 test, no default line" \
    'grep -q "^data: 60 train, 10 val, 30 test images" <<<"$out" && ! grep -q "^split" <<<"$out"'
check "the split is in the checkpoint's data record" \
    'grep -aq "test_split = 0.29999" "$tmp/whole/last.ckpt" && grep -aq "split_seed = 5" "$tmp/whole/last.ckpt"'

# --val N takes the training set's tail, here the last class's images:
# said, with the stratified flag named; a --val-split run is not warned.
out=$(train --data "$tmp/flat" --val 5 --epochs 1 --out "$tmp/tail" 2>&1)
check "--val 5 on class-ordered images: a warning that the tail covers 1 of the 10 classes" \
    'grep -q "^warning: --val 5 holds out the last 5 training images, which cover 1 of the 10 classes" <<<"$out"'
out=$(train --data "$tmp/flat" "${split[@]}" --epochs 1 --out "$tmp/nowarn" 2>&1)
check "--val-split: it trains with a validation set and no such warning" \
    'grep -q "^data: 60 train, 10 val" <<<"$out" && ! grep -q "^warning: --val" <<<"$out"'

# ---- 2. interrupted and resumed without split flags -----------------------------
train --data "$tmp/flat" "${split[@]}" --epochs 2 --stop-after 1 --out "$tmp/part" >/dev/null 2>&1
out=$(cd "$tmp" && "$tools/vit_train" --threads 1 --resume "$tmp/part/last.ckpt" 2>&1)
rc=$?
check "resumed without --data or split flags: the recorded split (60 train, 10 val, 30 test)" \
    '[ $rc -eq 0 ] && grep -q "^data: 60 train, 10 val, 30 test images" <<<"$out"'
check "resumed: the same final checkpoint as the uninterrupted run" \
    'cmp -s "$tmp/part/last.ckpt" "$tmp/whole/last.ckpt"'

# ---- 3. vit_eval finds the split --------------------------------------------------
mkdir "$tmp/elsewhere"
own=$(cd "$tmp/elsewhere" && "$tools/vit_eval" "$tmp/whole/last.ckpt" 2>&1)
given=$(cd "$tmp" && "$tools/vit_eval" "$tmp/whole/last.ckpt" --data ./flat/ 2>&1)
echo "     vit_eval without --data: $(acc "$own")"
check "vit_eval without --data: the run's 30 held-out test images" \
    'grep -q "^test split: 30 images" <<<"$own"'
check "vit_eval --data naming the run's folder: the same figures" \
    '[ -n "$(acc "$own")" ] && [ "$(acc "$own")" = "$(acc "$given")" ]'
other=$("$tools/vit_eval" "$tmp/default/last.ckpt" 2>&1)
check "the default run's vit_eval: its own $want test images" 'grep -q "^test split: $want images" <<<"$other"'

# ---- 4. other split flags on resume ------------------------------------------------
cp "$tmp/part/last.ckpt" "$tmp/keep.ckpt"
err=$("$tools/vit_train" --threads 1 --resume "$tmp/part/last.ckpt" --epochs 3 --test-split 0.2 \
      2>&1 >/dev/null)
rc=$?
echo "     stderr: $err"
check "resume with --test-split 0.2: refused in one line naming both splits" \
    '[ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -qF -- "--test-split 0.2 " <<<"$err" && grep -qF -- "was split with --val-split 0.1 --test-split 0.3 --split-seed 5" <<<"$err"'
err=$("$tools/vit_train" --threads 1 --resume "$tmp/part/last.ckpt" --epochs 3 --split-seed 6 \
      2>&1 >/dev/null)
rc=$?
check "resume with --split-seed 6: refused" '[ $rc -eq 2 ] && grep -qF -- "--split-seed 6:" <<<"$err"'
check "refused: the run untouched" 'cmp -s "$tmp/part/last.ckpt" "$tmp/keep.ckpt"'
err=$(train --data "$tmp/flat" --test-split 1.5 --epochs 1 --out "$tmp/x" 2>&1 >/dev/null)
check "--test-split 1.5: refused naming the flag" '[ -n "$err" ] && grep -qF -- "--test-split: expected a fraction" <<<"$err"'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
