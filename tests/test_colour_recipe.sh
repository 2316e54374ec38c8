#!/usr/bin/env bash
# The recipe's image_norm and data_norm through vit_train, on tiny CIFAR-format sets
# written by make_cifar (4 classes, 120 training images of 32x32):
#   1. colour that carries no class: the recipe line says image_norm 1 and
#      why, and the checkpoint's config holds it (so vit_eval applies it:
#      it reports the run's own accuracy), and vit_export's note on it
#      names the PyTorch check of the file's layout (ViT and Swin);
#   2. --image-norm 0 wins over the recipe: no such line, nothing stored;
#   3. colour that names the class: no image_norm, no channel_perm, but
#      data_norm 1 (stored; --data-norm 0 wins over it);
#   4. --data-norm 1 on the colour-free set: the recipe's image_norm gives
#      way, the run says the figures and stores them, vit_eval and
#      vit_export apply them, --init-from and --image-norm 1 beside it
#      are refused with one error each;
#   5. the recipe leaves a Swin's stem to the Swin's own rule: on 10,000
#      gray 8x8 images (IDX files written here) the run says and stores
#      stem 16 and stem2 32 with patch 1; --stem 0 trains the plain Swin.
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
# vit_export's image_norm note names the PyTorch check of the file's layout
ex=$("$tools/vit_export" "$tmp/f/last.ckpt" --out "$tmp/f.safetensors" 2>&1)
has "free: vit_export names the ViT's check" "which timm.VisionTransformer does not: (x - mean) / sqrt(var + 0.0001), each channel's over the image's pixels, as tools/torch_check_export.py does" "$ex"
out=$("$tools/vit_train" --data "$tmp/free" --arch swin --patch 4 --window 4 --embed-dim 8 --stages 1 \
      --epochs 1 --tta none --threads 1 --out "$tmp/fs" 2>&1)
check "free, swin: trains" 'grep -aq "^image_norm = 1$" "$tmp/fs/last.ckpt"' || indent "$out"
ex=$("$tools/vit_export" "$tmp/fs/last.ckpt" --out "$tmp/fs.safetensors" 2>&1)
has "free, swin: vit_export names Swin's check" "which torchvision.SwinTransformer does not: (x - mean) / sqrt(var + 0.0001), each channel's over the image's pixels, as tools/torch_check_swin.py does" "$ex"

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
has "class: the recipe line names data_norm 1" ", data_norm 1, for 120 images of 32x32x3" "$out"
check "class: its figures stored" 'grep -aq "^data_norm = 1$" "$tmp/c/last.ckpt" && grep -aq "^data_mean = " "$tmp/c/last.ckpt"'
out=$("$tools/vit_train" --data "$tmp/class" "${small[@]}" --data-norm 0 --out "$tmp/c0" 2>&1)
check "class, --data-norm 0: none stored" '! grep -aq "^data_" "$tmp/c0/last.ckpt"' || indent "$out"
check "free: no data_norm beside image_norm" '! grep -aq "^data_" "$tmp/f/last.ckpt"'

# ---- 4. data_norm -------------------------------------------------------------
out=$("$tools/vit_train" --data "$tmp/free" "${small[@]}" --data-norm 1 --out "$tmp/d" 2>&1)
rc=$?
check "data_norm: trains" '[ $rc -eq 0 ]' || indent "$out"
check "data_norm: the recipe's image_norm gives way" '! grep -q "image_norm" <<<"$out"' ||
    indent "$out"
has "data_norm: and so brightness and contrast stay" "brightness 0.3, contrast 0.3, saturation 0.3" "$out"
has "data_norm: the run says the figures" "data_norm: each channel as (x - mean) / std before the network, mean " "$out"
check "data_norm: the checkpoint holds them" \
    'grep -aq "^data_norm = 1$" "$tmp/d/last.ckpt" && grep -aqE "^data_mean = [0-9.e-]+,[0-9.e-]+,[0-9.e-]+$" "$tmp/d/last.ckpt" && grep -aqE "^data_std = [0-9.e-]+,[0-9.e-]+,[0-9.e-]+$" "$tmp/d/last.ckpt"'
acc=$(sed -nE 's/^test accuracy ([0-9.]+) .*/\1/p' <<<"$out")
ev=$("$tools/vit_eval" "$tmp/d/last.ckpt" --data "$tmp/free" 2>&1)
has "data_norm: vit_eval scores the run's accuracy ($acc)" "accuracy $acc" "$ev"
ex=$("$tools/vit_export" "$tmp/d/last.ckpt" --out "$tmp/d.safetensors" 2>&1)
has "data_norm: vit_export notes them" "by the training set's statistics (data_norm = 1 in the metadata)" "$ex"
check "data_norm: the metadata holds them" 'head -c 4096 "$tmp/d.safetensors" | grep -aq "\"data_mean\":\"[0-9.e,-]*\",\"data_std\":"'
out=$("$tools/vit_train" --data "$tmp/free" "${small[@]}" --data-norm 1 --image-norm 1 --out "$tmp/d2" 2>&1)
rc=$?
check "data_norm with image_norm: refused" '[ $rc -ne 0 ] && [ ! -e "$tmp/d2/last.ckpt" ]'
has "data_norm with image_norm: says why" "data_norm: not with image_norm" "$out"
out=$("$tools/vit_train" --data "$tmp/free" --epochs 1 --init-from "$tmp/d/last.ckpt" --data-norm 1 --out "$tmp/d3" 2>&1)
rc=$?
check "--init-from with --data-norm: refused" '[ $rc -eq 2 ]' || indent "$out"
has "--init-from with --data-norm: says why" "--data-norm: with --init-from the architecture is the file's" "$out"

# ---- 5. Swin's stem: its own rule, not the ViT recipe's ---------------------
# IDX files (big-endian header, then bytes): N gray 8x8 images of noise,
# labels 0 and 1 alternating.
be32() { # N as 4 big-endian bytes
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) \
              $(($1 >> 8 & 255)) $(($1 & 255)))"
}
idx() { # DIR PREFIX N
    { be32 2051; be32 "$3"; be32 8; be32 8; head -c $(($3 * 64)) /dev/urandom; } \
        >"$1/$2-images-idx3-ubyte"
    { be32 2049; be32 "$3"; for ((i = 0; i < $3; i += 2)); do printf '\x00\x01'; done; } \
        >"$1/$2-labels-idx1-ubyte"
}
mkdir "$tmp/gray" && idx "$tmp/gray" train 10000 && idx "$tmp/gray" t10k 100
tiny=(--arch swin --embed-dim 8 --heads-1 1 --depth-1 1 --epochs 1 --tta none --threads 1)
out=$("$tools/vit_train" --data "$tmp/gray" "${tiny[@]}" --out "$tmp/s" 2>&1)
check "swin, 10,000 images: trains" '[ -e "$tmp/s/last.ckpt" ]' || indent "$out"
has "swin, 10,000 images: the rule's line" "stem 16 and stem2 32 before the patches (10000 images or more)" "$out"
check "swin, 10,000 images: the checkpoint holds stem 16, stem2 32, patch 1" \
    'grep -aqx "stem = 16" "$tmp/s/last.ckpt" && grep -aqx "stem2 = 32" "$tmp/s/last.ckpt" && grep -aqx "patch = 1" "$tmp/s/last.ckpt"'
out=$("$tools/vit_train" --data "$tmp/gray" "${tiny[@]}" --stem 0 --out "$tmp/s0" 2>&1)
check "swin --stem 0: trains" '[ -e "$tmp/s0/last.ckpt" ]' || indent "$out"
check "swin --stem 0: no stem, patch 2" \
    '! grep -q "stem 16" <<<"$out" && grep -aqx "stem2 = 0" "$tmp/s0/last.ckpt" && grep -aqx "patch = 2" "$tmp/s0/last.ckpt"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
