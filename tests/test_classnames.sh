#!/usr/bin/env bash
# Class names travel with the model: a PNG-folder data set with classes
# bag/, coat/ and sneaker/ is trained for one epoch; the checkpoint holds
# the folder names, and vit_predict, vit_eval, vit_train's confusion matrix
# and vit_export's metadata show them, and vit_import brings them back; a format-1 checkpoint (no names)
# shows the class indices.  Usage:
#   test_classnames.sh TOOLS_DIR TESTS_DATA_DIR
set -u
tools=$1 data=$2
. "$(dirname "$0")/check.sh"

# Three classes of two 4x4 grayscale images each, in train/ and test/.
d=$tmp/shoes
for s in train test; do
    for c in bag coat sneaker; do
        mkdir -p "$d/$s/$c"
        cp "$data/bad/gray4x4.png" "$d/$s/$c/1.png"
        cp "$data/bad/gray4x4.png" "$d/$s/$c/2.png"
    done
done
out=$("$tools/vit_train" --data "$d" --out "$tmp/run" --dim 4 --heads 1 --mlp 4 --depth 1 \
    --patch 2 --epochs 1 --batch 2 --threads 1 2>&1)
same "vit_train finishes" 0 $?
# The confusion matrix: rows "INDEX NAME", columns the indices; each row
# holds the two test images of its class.
labels=$(sed -n '/^confusion matrix/,/^test accuracy/p' <<<"$out" | sed -n '2,5p' | cut -c1-9)
same "vit_train: confusion labels" "$(printf '             0    1    2\n0 bag        \n1 coat       \n2 sneaker    ' | cut -c1-9)" "$labels"

# vit_eval: the same layout, from the checkpoint's names.
ev=$("$tools/vit_eval" "$tmp/run/last.ckpt" --data "$d" --threads 1 2>&1)
same "vit_eval exits 0" 0 $?
same "vit_eval: header" "confusion matrix (rows: true class, columns: predicted)
             0    1    2" "$(sed -n 1,2p <<<"$ev")"
same "vit_eval: row labels" "0 bag    |1 coat   |2 sneaker|" \
    "$(sed -n 3,5p <<<"$ev" | cut -c1-9 | tr '\n' '|')"
same "vit_eval: each row holds its class's 2 images" "2 2 2" \
    "$(sed -n 3,5p <<<"$ev" | awk '{s = 0; for (i = 3; i <= NF; i++) s += $i; print s}' | tr '\n' ' ' | sed 's/ $//')"
# vit_eval prints the counts under the indices, the same as vit_train did.
same "vit_eval: matrix as vit_train printed it" \
    "$(sed -n '/^confusion matrix/,/^test accuracy/p' <<<"$out" | sed -n 1,5p)" "$(sed -n 1,5p <<<"$ev")"

# vit_predict: file, class name, probability.  The images are all alike,
# so one class is predicted for all; it is the column vit_eval counts in.
pr=$("$tools/vit_predict" "$tmp/run/last.ckpt" "$d/test/bag/1.png" "$d/test/sneaker/2.png" 2>&1)
same "vit_predict exits 0" 0 $?
col=$(sed -n 3p <<<"$ev" | awk '{for (i = 3; i <= NF; i++) if ($i == 2) print i - 3}')
names=(bag coat sneaker)
want=${names[${col:-0}]}
same "vit_predict: names" "$d/test/bag/1.png $want P
$d/test/sneaker/2.png $want P" "$(sed -E 's/ 0\.[0-9]{4}$/ P/; s/ 1\.0000$/ P/' <<<"$pr")"

# vit_export: the names in the safetensors metadata, a JSON array in a string.
"$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m.safetensors" >/dev/null 2>&1
same "vit_export exits 0" 0 $?
meta=$(grep -aoF '"class_names":"[\"bag\",\"coat\",\"sneaker\"]"' "$tmp/m.safetensors")
same "vit_export: class_names metadata" '"class_names":"[\"bag\",\"coat\",\"sneaker\"]"' "$meta"

# vit_import: the names come back from the metadata into the checkpoint,
# and vit_predict on the imported model prints them as before.
"$tools/vit_import" "$tmp/m.safetensors" --out "$tmp/imported.ckpt" >/dev/null 2>&1
same "vit_import exits 0" 0 $?
pi=$("$tools/vit_predict" "$tmp/imported.ckpt" "$d/test/bag/1.png" "$d/test/sneaker/2.png" 2>&1)
same "vit_import: vit_predict on the imported model prints the names" "$pr" "$pi"
# An existing checkpoint is not replaced without --force.
before=$(cksum <"$tmp/run/last.ckpt")
err=$("$tools/vit_import" "$tmp/m.safetensors" --out "$tmp/run/last.ckpt" 2>&1)
same "vit_import over an existing checkpoint: refused (exit 1), file untouched" \
    "1|vit_import: $tmp/run/last.ckpt already exists; pass --force to replace it|$before" \
    "$?|$err|$(cksum <"$tmp/run/last.ckpt")"
"$tools/vit_import" "$tmp/m.safetensors" --out "$tmp/imported.ckpt" --force >/dev/null 2>&1
same "vit_import --force replaces it" 0 $?

# A format-1 checkpoint (digits) holds no names: the indices are shown.
ev1=$("$tools/vit_eval" "$data/v1/digits-dim8-epoch1-of-2.ckpt" --threads 1 2>&1)
same "v1 checkpoint: vit_eval labels are the indices" \
    "confusion matrix (rows: true class, columns: predicted)
         0    1    2    3    4    5    6    7    8    9" "$(sed -n 1,2p <<<"$ev1")"
same "v1 checkpoint: row labels" "    0|    1|    9|" "$(sed -n '3p;4p;12p' <<<"$ev1" | cut -c1-5 | tr '\n' '|')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
