#!/usr/bin/env bash
# A folder of photos as a person has them, made by make_photos: PNG and
# JPEG files of 64-120 px, grayscale next to colour, a text file, names with
# a comma and a quote.  vit_train trains on it with no preprocessing (the
# rule's size and channels said in one line, recorded in the checkpoint) or
# with --image-size/--channels; --skip-bad skips a broken file and names
# it; vit_eval names its scoring and prints precision/recall/F1; vit_predict
# takes the folder and writes a CSV that an RFC 4180 reader (csv_fields)
# reads back; vit_attn reads a JPEG; --class-names names IDX classes.
# Usage:
#   test_photos.sh TOOLS_DIR MAKE_PHOTOS CSV_FIELDS
set -u
tools=$1 make_photos=$2 csv_fields=$3
. "$(dirname "$0")/check.sh"
# The JSON header of a safetensors file (after its 8-byte little-endian length).
st_header() { head -c $((8 + $(od -An -tu8 -N8 "$1"))) "$1" | tail -c +9; }

"$make_photos" "$tmp/photos"
rc=$?
if [ $rc -eq 77 ]; then echo "skip: built without libjpeg (the folder needs JPEG files)"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL make_photos"; exit 1; }
"$make_photos" "$tmp/bad" --bad || { echo "FAIL make_photos --bad"; exit 1; }
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --epochs 2 --batch 8 --threads 1)

# ---- the mixed folder trains as it is ----------------------------------
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/run" "${small[@]}" 2>&1)
rc=$?
check "mixed folder: vit_train exits 0" '[ $rc -eq 0 ]' || indent "$out"
# Heights 120, 80, 64, 100 and widths 96, 64, 64, 90 (and the two named
# files): upper medians 100x90, the longer side capped at 64 -> 64x57.6,
# rounded to multiples of 8 -> 64x56; colour among gray -> RGB.
check "mixed folder: one line says the rule and its result" \
    '[ "$(grep -c "^images: 26 read, 64x64 to 120x96 (HxW), 13 gray, 13 colour; 26 resized, 13 converted, all now 64x56x3 (sizes differ: the median, longest side at most 64, sides multiples of 8; RGB, as some images are colour; --image-size and --channels choose)" <<<"$out")" -eq 1 ]'
check "mixed folder: the data line counts the fitted images and the ignored notes.txt" \
    'grep -qx "data: 20 train, 6 test images of 64x56x3, 3 classes (1 other file ignored: not .png, .jpg or .jpeg)" <<<"$out"'
check "mixed folder: the transform is in the checkpoint's data record" 'grep -aqx "fit = 64x56x3" "$tmp/run/last.ckpt"'

# ---- the same folder for a Swin: rectangular windows -------------------
# 64x56 makes a 16x14 grid of patch 4, which no square window of 4..8
# tiles: the Swin trains on the rule's shape as it is, in windows of 8x7
# (8x7 after merging: one window), said in its rule's line and recorded,
# and vit_eval scores it as the run did.
swin=(--arch swin --epochs 1 --batch 8 --threads 1)
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/runsw" "${swin[@]}" 2>&1)
rc=$?
check "mixed folder, --arch swin: trains on the rule's 64x56" \
    '[ $rc -eq 0 ] && grep -q "^data: 20 train, 6 test images of 64x56x3" <<<"$out"' || indent "$out"
check "mixed folder, --arch swin: the images line is the rule's, no square" \
    '[ "$(grep -c "^images: 26 read, 64x64 to 120x96 (HxW), 13 gray, 13 colour; 26 resized, 13 converted, all now 64x56x3 (sizes differ: the median, longest side at most 64, sides multiples of 8; RGB, as some images are colour; --image-size and --channels choose)" <<<"$out")" -eq 1 ]'
check "mixed folder, --arch swin: the rule's line says the windows of 8x7" \
    'grep -q "^swin (keys not set by flag or --config): patch 4 makes a 16x14 grid (at most 16x16), window 8x7 divides it, 2 stages (8x7 after merging), widths 32..64, depths 2+6$" <<<"$out"' || indent "$out"
check "mixed folder, --arch swin: the shape and the window's columns are in the checkpoint" \
    'grep -aqx "fit = 64x56x3" "$tmp/runsw/last.ckpt" && grep -aqx "window = 8" "$tmp/runsw/last.ckpt" && grep -aqx "window_w = 7" "$tmp/runsw/last.ckpt"'
ev=$("$tools/vit_eval" "$tmp/runsw/last.ckpt" --threads 1 2>&1)
got=$(sed -n "s/^test split: 6 images, loss [0-9.]*, accuracy \([0-9.]*\).*/\1/p" <<<"$ev")
said=$(sed -n "s/^the run reported test accuracy \([0-9.]*\).*/\1/p" <<<"$ev")
check "mixed folder, --arch swin: vit_eval fits the images as the run did (its accuracy)" \
    '[ -n "$got" ] && [ "$got" = "$said" ]' || indent "$ev"
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/runsw2" "${swin[@]}" --window 8 2>&1)
rc=$?
check "--arch swin --window 8 on 64x56: square 8x8 windows refused, naming stage, grid and window" \
    '[ $rc -ne 0 ] && grep -q "stage 0.s 16x14 token grid is not a multiple of window 8 (rows of 8, columns of 8)" <<<"$out" && [ ! -e "$tmp/runsw2/last.ckpt" ]' || indent "$out"

# ---- flags convert every image ------------------------------------------
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/run32" --image-size 32x24 --channels 1 \
    "${small[@]}" 2>&1)
check "--image-size 32x24 --channels 1: applied" \
    'grep -q "^data: 20 train, 6 test images of 32x24x1" <<<"$out" && grep -q "all now 32x24x1 (as asked)" <<<"$out"' || indent "$out"
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/runhw" --image-height 32 --image-width 24 \
    --channels 1 "${small[@]}" 2>&1)
check "--image-height 32 --image-width 24 --channels 1: applied, not ignored" \
    'grep -q "^data: 20 train, 6 test images of 32x24x1" <<<"$out"' || indent "$out"
out=$("$tools/vit_train" --data "$tmp/photos" --out "$tmp/runhw2" --image-height 32 --channels 1 \
    "${small[@]}" 2>&1)
rc=$?
check "--image-height alone: refused with the reason" \
    '[ $rc -eq 2 ] && grep -q "image-height alone: give --image-width too" <<<"$out" && [ ! -e "$tmp/runhw2" ]'
out=$("$tools/vit_train" --resume "$tmp/run32/last.ckpt" --image-size 16 --epochs 3 2>&1)
rc=$?
check "resume with another --image-size: refused naming the run's" \
    '[ $rc -eq 2 ] && grep -q "the run .* trained on images of 32x24x1" <<<"$out"' || indent "$out"
out=$("$tools/vit_train" --resume "$tmp/run32/last.ckpt" --epochs 3 2>&1)
rc=$?
check "resume without the flags: the run's transform again" \
    '[ $rc -eq 0 ] && grep -q "all now 32x24x1 (as the run did)" <<<"$out"' || indent "$out"
# IDX digits (8x8 -> 16x16 RGB): flags apply to every layout.
out=$("$tools/vit_train" --data digits --out "$tmp/rundig" --image-size 16 --channels 3 \
    "${small[@]}" --epochs 1 2>&1)
check "digits --image-size 16 --channels 3: 16x16x3" 'grep -q "test images of 16x16x3" <<<"$out"' || indent "$out"

# ---- unreadable files ---------------------------------------------------
out=$("$tools/vit_train" --data "$tmp/bad" --out "$tmp/runbad" "${small[@]}" 2>&1)
rc=$?
check "a broken file: refused, named, with the flag that skips it" \
    '[ $rc -eq 1 ] && [ "$(grep -c "" <<<"$out")" -eq 1 ] && grep -q "square/broken.png: not a PNG file (bad signature) (--skip-bad" <<<"$out"' ||
    indent "$out"
out=$("$tools/vit_train" --data "$tmp/bad" --out "$tmp/runbad" --skip-bad "${small[@]}" 2>&1)
rc=$?
check "--skip-bad: trains, counts and names the file" \
    '[ $rc -eq 0 ] && grep -q "^skipped 1 unreadable file (--skip-bad): .*square/broken.png: not a PNG" <<<"$out"' ||
    indent "$out"

# ---- vit_eval: the run's transform, its scoring, per-class figures -------
ev=$("$tools/vit_eval" "$tmp/run/last.ckpt" --threads 1 2>&1)
rc=$?
check "vit_eval on the mixed run: exit 0, its 6 test images" '[ $rc -eq 0 ] && grep -q "^test split: 6 images" <<<"$ev"' || indent "$ev"
tta=$(sed -n 's/^test split: .*(tta \(.*\))$/\1/p' <<<"$ev")
check "vit_eval names its scoring ($tta)" \
    'grep -q "^scoring: ${tta:-one pass}" <<<"$ev"'
ev1=$("$tools/vit_eval" "$tmp/run/last.ckpt" --threads 1 --tta none 2>&1)
check "vit_eval --tta none: one pass, said" \
    'grep -qx "scoring: one pass an image, as --tta asks" <<<"$ev1" && grep -q "accuracy 0\.[0-9]*$" <<<"$ev1"'
# Recall = diagonal / row sum and precision = diagonal / column sum of the
# confusion matrix printed above them.
prf=$(awk '/^confusion matrix/ {m = 1; next}
    m == 1 && /^ +0/ {next}
    m == 1 && /^[0-9]+ / {k = $1; for (j = 3; j <= NF; j++) {c[k, j - 3] = $j; K = NF - 2}; next}
    /^class +precision/ {m = 2; next}
    m == 2 && /^[0-9]+ / {n++; k = $1; row = 0; col = 0
        for (j = 0; j < K; j++) {row += c[k, j]; col += c[j, k]}
        r = row ? c[k, k] / row : 0; p = col ? c[k, k] / col : 0
        pr = ($(NF - 3) == "-") ? 0 : $(NF - 3)
        if (sprintf("%.4f", r) != $(NF - 2) || sprintf("%.4f", p) != sprintf("%.4f", pr) || $NF != row) bad++}
    END {print n + 0, bad + 0}' <<<"$ev")
check "vit_eval: precision and recall of each class agree with the matrix ($prf)" '[ "$prf" = "3 0" ]' || indent "$ev"

# ---- vit_predict: the folder, recursively, into a CSV --------------------
pr=$("$tools/vit_predict" "$tmp/run/last.ckpt" "$tmp/photos" --csv "$tmp/pred.csv" --topk 2 2>&1)
rc=$?
check "vit_predict FOLDER --csv: exit 0, summary" \
    '[ $rc -eq 0 ] && grep -q "26 of 26 images classified into $tmp/pred.csv" <<<"$pr" && grep -q "1 file in the folders not .png" <<<"$pr"' ||
    indent "$pr"
# The reader itself: quoted commas and doubled quotes, and a refusal.
printf 'a,"b, ""c"""\r\n1,2\r\n' >"$tmp/ok.csv"
printf 'a,"b\r\n' >"$tmp/cut.csv"
check "csv_fields reads RFC 4180 and refuses a cut field" \
    '[ "$("$csv_fields" "$tmp/ok.csv")" = "a|b, \"c\"
1|2" ] && ! "$csv_fields" "$tmp/cut.csv" 2>/dev/null'
rows=$("$csv_fields" "$tmp/pred.csv")
rc=$?
check "CSV: parses as RFC 4180, a header and 26 rows" '[ $rc -eq 0 ] && [ "$(grep -c "" <<<"$rows")" -eq 27 ]'
check "CSV: header" '[ "$(head -1 <<<"$rows")" = "path|class|probability|class_2|probability_2" ]'
want=$(find "$tmp/photos" -type f \( -name "*.png" -o -name "*.jpg" -o -name "*.jpeg" \) | LC_ALL=C sort)
check "CSV: every image once, paths as they are" \
    '[ "$(tail -n +2 <<<"$rows" | cut -d"|" -f1 | LC_ALL=C sort)" = "$want" ]'
check "CSV: the path with a comma and spaces comes back whole" \
    'grep -qF "$tmp/photos/circle/my circle, v2.png|" <<<"$rows"'
check "CSV: the path with a quote comes back whole" \
    'grep -qF "$tmp/photos/circle/say \"hi\".jpg|" <<<"$rows"'
check "CSV: classes are the folder names, probabilities in [0, 1], sorted" \
    '[ -n "$rows" ] && [ -z "$(tail -n +2 <<<"$rows" | awk -F"|" "!(\$2 ~ /^(circle|square|stripes)\$/ && \$4 ~ /^(circle|square|stripes)\$/ && \$3 >= \$5 && \$3 <= 1 && \$5 >= 0 && \$2 != \$4)")" ]'
pr=$("$tools/vit_predict" "$tmp/run/last.ckpt" "$tmp/photos" --csv "$tmp/pred.csv" 2>&1)
rc=$?
check "vit_predict --csv: an existing file is refused without --force" \
    '[ $rc -eq 1 ] && grep -q "pred.csv already exists; pass --force" <<<"$pr" && [ "$("$csv_fields" "$tmp/pred.csv" | head -1)" = "path|class|probability|class_2|probability_2" ]'
a=$("$tools/vit_predict" "$tmp/run/last.ckpt" "$tmp/photos/circle/circle_001.jpg" --tta none 2>&1)
b=$("$tools/vit_predict" "$tmp/run/last.ckpt" "$tmp/photos/circle/circle_001.jpg" --tta shift9flip 2>&1)
check "vit_predict --tta: none and shift9flip give different probabilities" \
    '[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]'
check "vit_predict --help: why probabilities stay below 1" \
    '"$tools/vit_predict" --help | grep -q "label smoothing"'

# ---- vit_attn: a JPEG of another size, fitted as the run did ------------
at=$("$tools/vit_attn" "$tmp/run/last.ckpt" "$tmp/photos/square/square_001.jpg" --out "$tmp/a.png" 2>&1)
rc=$?
check "vit_attn reads a JPEG and fits it" '[ $rc -eq 0 ] && [ -s "$tmp/a.png" ]' || indent "$at"

# ---- vit_export: the run's own data fitted for its logits ---------------
ex=$("$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m.safetensors" --logits "$tmp/logits.csv" 2>&1)
rc=$?
check "vit_export --logits on the mixed run's data" '[ $rc -eq 0 ] && [ -s "$tmp/m.safetensors" ] && [ -s "$tmp/logits.csv" ]' ||
    indent "$ex"
# The run's transform is in the metadata with how to prepare an image, and
# vit_import reads the file.
meta=$(st_header "$tmp/m.safetensors")
check "vit_export: the metadata has the run's fit and how to prepare an image" \
    'grep -q "\"fit\":\"64x56x3\"" <<<"$meta" && grep -q "\"fit_note\":\"[^\"]*converted to 3 channels[^\"]*resized to 64x56 " <<<"$meta" && grep -q "fitted its images to 64x56x3" <<<"$ex"' ||
    indent "$ex"
im=$("$tools/vit_import" "$tmp/m.safetensors" --out "$tmp/imported.ckpt" 2>&1)
rc=$?
check "vit_import reads an export with a fit" '[ $rc -eq 0 ] && [ -s "$tmp/imported.ckpt" ]' || indent "$im"

# ---- --class-names for IDX data -----------------------------------------
"$tools/vit_make_data" gray28 "$tmp/idx" --count 40 >/dev/null 2>&1
printf 'zero\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n' >"$tmp/names.txt"
out=$("$tools/vit_train" --data "$tmp/idx" --out "$tmp/runidx" --class-names "$tmp/names.txt" \
    "${small[@]}" --epochs 1 2>&1)
check "--class-names: the confusion matrix names the classes" 'grep -q "^9 nine " <<<"$out"' || indent "$out"
ev=$("$tools/vit_eval" "$tmp/runidx/last.ckpt" --threads 1 2>&1)
check "--class-names: stored in the checkpoint (vit_eval shows them)" 'grep -q "^3 three " <<<"$ev"'
out=$("$tools/vit_train" --resume "$tmp/runidx/last.ckpt" --epochs 2 2>&1)
ev=$("$tools/vit_eval" "$tmp/runidx/last.ckpt" --threads 1 2>&1)
check "--class-names: a resume keeps them" 'grep -q "^3 three " <<<"$ev"' || indent "$out"
ex=$("$tools/vit_export" "$tmp/runidx/last.ckpt" --out "$tmp/idx.safetensors" 2>&1)
rc=$?
check "vit_export of a run that fitted nothing: no fit in the metadata" \
    '[ $rc -eq 0 ] && st_header "$tmp/idx.safetensors" | grep -q "\"channels\":\"1\"" && ! st_header "$tmp/idx.safetensors" | grep -q "\"fit" && ! grep -q "fitted" <<<"$ex"' || indent "$ex"

# A run that fitted nothing: an image of another size needs --fit.
at=$("$tools/vit_attn" "$tmp/runidx/last.ckpt" "$tmp/photos/square/square_001.jpg" --out "$tmp/b.png" 2>&1)
rc=$?
check "vit_attn: a JPEG of another size without --fit: refused naming it" \
    '[ $rc -eq 1 ] && grep -q "image is 80x64x3 but the model expects 28x28x1 (--fit" <<<"$at" && [ ! -e "$tmp/b.png" ]' || indent "$at"
at=$("$tools/vit_attn" "$tmp/runidx/last.ckpt" "$tmp/photos/square/square_001.jpg" --fit --out "$tmp/b.png" 2>&1)
rc=$?
check "vit_attn --fit: converted and resized" '[ $rc -eq 0 ] && [ -s "$tmp/b.png" ]' || indent "$at"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
