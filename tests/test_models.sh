#!/usr/bin/env bash
# Larger images: the data sets vit_make_data derives from the digits, the
# patch vit_train picks when none is given, its model summary line, and
# each shipped models/*.cfg trained a few steps.  Usage:
#   test_models.sh TOOLS_DIR MODELS_DIR
#  1. vit_make_data gray28 is the same bytes every time (the README's
#     accuracy is measured on exactly these files: their SHA-256 is pinned
#     here), and refuses to write into an existing folder;
#  2. 28x28 images with no patch given: patch 4 (a 7x7 grid), said in one
#     line, and the summary line names the parameters (counted here
#     independently), 50 tokens, a speed and an ETA; a --patch flag or a
#     patch in a --config file is kept, without that line, and tiles
#     without the default's overlap; 8x8 digits keep the default (4x4
#     patches at stride 2, padding 1);
#  3. models/gray28.cfg and models/rgb32.cfg: parse, describe the model
#     their comments say (parameter count), train on a slice of their data
#     set with the file's recipe, and the training loss falls.
set -u
tools=$1 models=$2
. "$(dirname "$0")/check.sh"
cd "$tmp" || exit 1

# ---- 1. the derived data ---------------------------------------------------
"$tools/vit_make_data" gray28 g28 >/dev/null || bad "vit_make_data gray28 failed"
sum=$(cat g28/train-images-idx3-ubyte g28/train-labels-idx1-ubyte g28/t10k-images-idx3-ubyte \
      g28/t10k-labels-idx1-ubyte | sha256sum | cut -c1-16)
same "gray28: the pinned bytes" ef9818c7ea5312c7 "$sum"
err=$("$tools/vit_make_data" gray28 g28 2>&1)
same "vit_make_data refuses an existing folder (exit 1)" 1 $?
case $err in *"g28: File exists (give a new folder: nothing is overwritten)"*) ok "its message names the folder" ;;
    *) bad "refusal message: $err" ;; esac
"$tools/vit_make_data" gray28 g28s --count 64 >/dev/null || bad "vit_make_data --count failed"
"$tools/vit_make_data" rgb32 r32s --count 96 >/dev/null || bad "vit_make_data rgb32 failed"
same "rgb32: 96 train images in 10 class folders" "96 10" \
    "$(find r32s/train -name '*.png' | wc -l) $(find r32s/train -mindepth 1 -type d | wc -l)"

# ---- 2. the patch picked for larger images -----------------------------------
tiny=(--dim 16 --heads 2 --mlp 16 --depth 1 --epochs 1 --batch 16 --threads 1)
# The recipe's stem for larger images: a 3x3 convolution of 16 channels
# (9*16+16); 16*16*16+16 patch embedding of its 16-channel feature map, 16
# class token, 50*16 positions, one block (2 norms of 32, qkv 3*(16*16+16),
# proj 272, MLP 272 + 272), final norm 32, head 16*10+10.
want_params=$((160 + 4112 + 16 + 50 * 16 + 32 + 3 * 272 + 272 + 32 + 272 + 272 + 32 + 170))
out=$("$tools/vit_train" --data g28s --out run1 "${tiny[@]}" 2>&1)
same "28x28, no patch given: exit 0" 0 $?
same "the choice, in one line" \
    "patch 4 (no --patch given): 7x7 patches of 28x28, the finest grid within 8x8" \
    "$(grep '^patch ' <<<"$out")"
summary=$(grep '^model: ' <<<"$out")
if [[ $summary =~ ^model:\ $want_params\ parameters,\ 50\ tokens\ \(7x7\ patches\ of\ 4\),\ ([0-9]+)\ img/s,\ ETA\ [0-9]+:[0-5][0-9]:[0-5][0-9]$ ]] &&
   [ "${BASH_REMATCH[1]}" -gt 0 ]; then
    ok "summary: $summary"
else
    bad "summary line '$summary' (want $want_params parameters, 50 tokens, a speed > 0, an ETA)"
fi
if [ "$(grep -c . <<<"$summary")" -eq 1 ] && [ ${#summary} -le 79 ]; then
    ok "one summary line of ${#summary} columns"
else
    bad "summary: $(grep -c . <<<"$summary") lines, ${#summary} columns"
fi
out=$("$tools/vit_train" --data g28s --out run2 "${tiny[@]}" --patch 7 2>&1)
same "--patch 7 is kept: no choice line" "" "$(grep '^patch ' <<<"$out")"
same "--patch 7: 17 tokens" 1 "$(grep -c '^model: .* 17 tokens (4x4 patches of 7)' <<<"$out")"
printf 'patch = 14\n' >p14.cfg
out=$("$tools/vit_train" --data g28s --out run3 --config p14.cfg "${tiny[@]}" 2>&1)
same "patch in a --config file is kept: no choice line" "" "$(grep '^patch ' <<<"$out")"
same "--config patch 14: 5 tokens" 1 "$(grep -c '^model: .* 5 tokens (2x2 patches of 14)' <<<"$out")"
out=$("$tools/vit_train" --data digits --out run4 "${tiny[@]}" 2>&1)
same "8x8 digits: the default patch 4 at stride 2, padding 1, no choice line" "|1" \
    "$(grep '^patch ' <<<"$out")|$(grep -c '^model: .* 17 tokens (4x4 patches of 4, stride 2, padding 1)' <<<"$out")"

# ---- 3. the shipped configs ------------------------------------------------
# Each file's model and recipe as written, but 3 epochs on a slice of its
# data set; the parameter count is the file's model's (dim 64, depth 4,
# mlp 128, 4x4 patches: embedding 16*C*64+64, 64 class token, tokens*64
# positions, 4 blocks of 33472, norm 128, head 650).
for spec in "gray28 g28s 1 50" "rgb32 r32s 3 65"; do
    read -r name dir ch tokens <<<"$spec"
    cfg=$models/$name.cfg
    params=$((16 * ch * 64 + 64 + 64 + tokens * 64 + 4 * 33472 + 128 + 650))
    want=$(awk -v n="$params" 'BEGIN { printf "%.1fk", n / 1000 }')
    out=$("$tools/vit_train" --data "$dir" --config "$cfg" --out "run-$name" --epochs 3 \
          --threads 2 2>&1)
    same "$name.cfg: trains (exit 0)" 0 $?
    same "$name.cfg: $want parameters, $tokens tokens" 1 \
        "$(grep -c "^model: $want parameters, $tokens tokens (.x. patches of 4)" <<<"$out")"
    l1=$(awk -F, 'NR == 2 { print $2 }' "run-$name/metrics.csv")
    l3=$(awk -F, 'NR == 4 { print $2 }' "run-$name/metrics.csv")
    if [ -n "$l1" ] && [ -n "$l3" ] && awk -v a="$l1" -v b="$l3" 'BEGIN { exit !(b < a - 0.02) }'; then
        ok "$name.cfg: training loss falls, $l1 -> $l3"
    else
        bad "$name.cfg: training loss $l1 -> $l3 (want a fall of more than 0.02)"
        sed 's/^/     /' "run-$name/metrics.csv"
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
