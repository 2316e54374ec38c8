#!/usr/bin/env bash
# The recipe's image_norm through vit_train, on tiny CIFAR-format sets
# written by make_cifar (4 classes, 120 training images of 32x32):
#   1. colour that carries no class: the recipe line says image_norm 1 and
#      why, and the checkpoint's config holds it (so vit_eval applies it:
#      it reports the run's own accuracy);
#   2. --image-norm 0 wins over the recipe: no such line, nothing stored;
#   3. colour that names the class: no image_norm, no channel_perm.
# A one-epoch run of a small model each (seconds).
# Usage: test_colour_recipe.sh TOOLS_DIR MAKE_CIFAR
set -u
tools=$1 make_cifar=$2
. "$(dirname "$0")/check.sh"
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --epochs 1 --tta none --threads 1)

mkdir "$tmp/free" "$tmp/class"
"$make_cifar" "$tmp/free" free && "$make_cifar" "$tmp/class" class ||
    { echo "FAIL make_cifar"; exit 1; }

# ---- 1. colour free ---------------------------------------------------------
out=$("$tools/vit_train" --data "$tmp/free" "${small[@]}" --out "$tmp/f" 2>&1)
rc=$?
check "free: trains" '[ $rc -eq 0 ]' || indent "$out"
has "free: the recipe line names image_norm 1" ", invert 1, image_norm 1, for 120 images of 32x32x3" "$out"
has "free: and says why" "image_norm 1: each image standardised per channel before the network" "$out"
check "free: the checkpoint's config has it" 'grep -aq "^image_norm = 1$" "$tmp/f/last.ckpt"'
acc=$(sed -nE 's/^test accuracy ([0-9.]+) .*/\1/p' <<<"$out")
ev=$("$tools/vit_eval" "$tmp/f/last.ckpt" --data "$tmp/free" 2>&1)
has "free: vit_eval scores the run's accuracy ($acc)" "accuracy $acc" "$ev"

# ---- 2. the flag wins -------------------------------------------------------
out=$("$tools/vit_train" --data "$tmp/free" "${small[@]}" --image-norm 0 --out "$tmp/f0" 2>&1)
rc=$?
check "--image-norm 0: trains" '[ $rc -eq 0 ]' || indent "$out"
check "--image-norm 0: no image_norm in the recipe line" '! grep -q "image_norm" <<<"$out"' ||
    indent "$out"
check "--image-norm 0: none stored" '! grep -aq "^image_norm" "$tmp/f0/last.ckpt"'

# ---- 3. colour names the class ----------------------------------------------
out=$("$tools/vit_train" --data "$tmp/class" "${small[@]}" --out "$tmp/c" 2>&1)
rc=$?
check "class: trains" '[ $rc -eq 0 ]' || indent "$out"
has "class: the colour test finds the class" "colour carries class, so no channel_perm or invert" "$out"
check "class: no image_norm" '! grep -q "image_norm" <<<"$out"' || indent "$out"
check "class: none stored" '! grep -aq "^image_norm" "$tmp/c/last.ckpt"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
