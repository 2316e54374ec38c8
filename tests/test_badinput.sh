#!/usr/bin/env bash
# Bad input, one table: every malformed input the tools may meet - truncated
# and garbled files of every format, wrong magic numbers, absurd dimensions
# that would overflow a size computation, images of mismatched size, empty
# class folders, labels out of range, checkpoints from another
# configuration, flags out of range - must give
#   - a non-zero exit,
#   - exactly ONE line on stderr, naming the file or flag and the problem
#     (each row's pattern says which),
#   - nothing half-written: the output folder of vit_train (which holds a
#     checkpoint and metrics from an earlier run) keeps exactly the same
#     files with the same contents, so no *.tmp* file and an unchanged
#     checkpoint.
# Absurd sizes in headers prove that sizes read from files are checked
# against the file's length before any allocation: a loader that trusted
# them would try to allocate terabytes (or take minutes to decode).
#
# Most malformed files are made here with printf, head and dd; those that
# need a valid checksum over altered content are committed in BAD_DIR
# (tests/data/bad, written by its make_bad.py).
# Usage: test_badinput.sh TOOLS_DIR BAD_DIR DIGITS_CSV_GZ
set -u
tools=$1 bad=$2 digits=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
# A size the library must refuse is refused by malloc returning NULL; under
# AddressSanitizer that needs allocator_may_return_null (else ASan aborts),
# and ASan then prints a warning line of its own, which row() drops.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"

out=$tmp/out # vit_train's output folder in every row
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1)

# ---- a good run to start from ---------------------------------------------
"$tools/vit_train" "${small[@]}" --epochs 1 --quiet --out "$out" >/dev/null 2>&1 ||
    { echo "FAIL could not make the starting checkpoint"; exit 1; }
good=$tmp/good.ckpt
cp "$out/last.ckpt" "$good"
snapshot() { (cd "$out" && ls -A && cksum -- *); }
before=$(snapshot)

# row NAME PATTERN TOOL ARGS...: runs the tool (vit_train also gets --out,
# --force, so that the folder's run is no excuse to stop early, and --quiet
# first, so that a row's own flags win), then checks the exit,
# the single stderr line against PATTERN (grep -E) and the output folder.
row() {
    local name=$1 pat=$2 tool=$3
    shift 3
    local args=("$@")
    [ "$tool" = vit_train ] && args=(--out "$out" --force --quiet "${small[@]}" "$@")
    local err rc lines problem=""
    "$tools/$tool" "${args[@]}" 2>"$tmp/stderr" >/dev/null
    rc=$?
    # (AddressSanitizer's own note on a refused allocation is not the tool's)
    err=$(grep -v '^==[0-9]*==WARNING: AddressSanitizer failed to allocate' "$tmp/stderr")
    lines=$(printf '%s' "$err" | grep -c '')
    [ $rc -eq 0 ] && problem="exit 0"
    [ $rc -gt 128 ] && problem="killed by signal $((rc - 128))"
    [ -z "$problem" ] && [ "$lines" -ne 1 ] && problem="$lines lines on stderr"
    [ -z "$problem" ] && ! grep -qE -- "$pat" <<<"$err" && problem="message does not match /$pat/"
    [ -z "$problem" ] && [ "$(snapshot)" != "$before" ] && problem="output folder changed"
    if [ -z "$problem" ]; then
        pass=$((pass + 1))
        echo "ok   $name: $err"
    else
        fail=$((fail + 1))
        echo "FAIL $name: $problem; exit $rc, stderr:"
        sed 's/^/     /' <<<"$err"
        echo "     output folder now:"; snapshot | sed 's/^/     /'
    fi
}

# ---- digits CSV (vit_train --data digits reads $VIT_DIGITS) ----------------
csv=$tmp/csv
mkdir "$csv"
zcat "$digits" >"$csv/all.csv"
head -n 1500 "$csv/all.csv" >"$csv/ok.csv"
digits_row() { # NAME PATTERN FILE
    VIT_DIGITS=$3 row "$1" "$2" vit_train --data digits
}
head -c 2000 "$digits" >"$csv/cut.csv.gz"
digits_row "csv: truncated gzip" "cut.csv.gz:[0-9]+: file is truncated or corrupt" "$csv/cut.csv.gz"
cp "$digits" "$csv/flipped.csv.gz"
printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$csv/flipped.csv.gz" bs=1 seek=5000 conv=notrunc 2>/dev/null
digits_row "csv: garbled gzip" "flipped.csv.gz:[0-9]+: file is truncated or corrupt" "$csv/flipped.csv.gz"
sed '3s/^0,/x,/' "$csv/ok.csv" >"$csv/word.csv"
digits_row "csv: non-integer field" "word.csv:3: field 1 \(pixel\) 'x' is not an integer" "$csv/word.csv"
sed '4s/,[0-9]*$//' "$csv/ok.csv" >"$csv/short.csv"
digits_row "csv: missing field" "short.csv:4: 64 fields, expected 65" "$csv/short.csv"
sed '5s/,[0-9]*$/,0,0/' "$csv/ok.csv" >"$csv/long.csv"
digits_row "csv: extra field" "long.csv:5: 66 fields, expected 65" "$csv/long.csv"
sed '6s/^0,/17,/' "$csv/ok.csv" >"$csv/pixel.csv"
digits_row "csv: pixel out of range" "pixel.csv:6: field 1 \(pixel\) = 17 is out of range 0..16" "$csv/pixel.csv"
sed '7s/,[0-9]*$/,10/' "$csv/ok.csv" >"$csv/label.csv"
digits_row "csv: label out of range" "label.csv:7: field 65 \(label\) = 10 is out of range 0..9" "$csv/label.csv"
sed '8s/,[0-9]*$/,-1/' "$csv/ok.csv" >"$csv/negative.csv"
digits_row "csv: negative label" "negative.csv:8: field 65 \(label\) = -1 is out of range" "$csv/negative.csv"
sed '9s/^0,/99999999999999999999999,/' "$csv/ok.csv" >"$csv/huge.csv"
digits_row "csv: number overflowing long" "huge.csv:9: field 1 \(pixel\) = 9+ is out of range" "$csv/huge.csv"
head -n 5 "$csv/ok.csv" >"$csv/few.csv"
digits_row "csv: too few lines" "few.csv:6: file ends after 5 data lines; need at least 1438" "$csv/few.csv"
: >"$csv/empty.csv"
digits_row "csv: empty file" "empty.csv:1: file ends after 0 data lines" "$csv/empty.csv"
sed '10s/.*//' "$csv/ok.csv" >"$csv/blank.csv"
digits_row "csv: blank line inside" "blank.csv:10: blank line in the middle of the data" "$csv/blank.csv"
{ head -n 3 "$csv/ok.csv"; head -c 5000 /dev/zero | tr '\0' '1'; echo; } >"$csv/longline.csv"
digits_row "csv: endless line" "longline.csv:4: line longer than" "$csv/longline.csv"
cp "$good" "$csv/binary.csv"
digits_row "csv: binary file" "binary.csv:1: " "$csv/binary.csv"
digits_row "csv: missing file" "$csv/none.csv.gz: cannot open" "$csv/none.csv.gz"

# ---- IDX files (vit_train --data DIR) -----------------------------------------
# be32 N: N as four big-endian bytes.
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
# images MAGIC COUNT ROWS COLS DATA_BYTES / labels MAGIC COUNT LABEL_BYTES
images() { be32 "$1"; be32 "$2"; be32 "$3"; be32 "$4"; head -c "$5" /dev/zero | tr "\\0" "\\200"; }
labels() { be32 "$1"; be32 "$2"; printf "$3"; }
# idx_set NAME: a valid set of 6 train and 3 test 4x4 images, 3 classes.
idx_set() {
    local d=$tmp/idx/$1
    mkdir -p "$d"
    images 0x803 6 4 4 96 >"$d/train-images-idx3-ubyte"
    labels 0x801 6 '\0\1\2\0\1\2' >"$d/train-labels-idx1-ubyte"
    images 0x803 3 4 4 48 >"$d/t10k-images-idx3-ubyte"
    labels 0x801 3 '\2\1\0' >"$d/t10k-labels-idx1-ubyte"
    echo "$d"
}
d=$(idx_set magic); images 0x801 6 4 4 96 >"$d/train-images-idx3-ubyte"
row "idx: wrong image magic" "train-images-idx3-ubyte: magic 0x00000801, expected 0x00000803" vit_train --data "$d"
d=$(idx_set lmagic); labels 0x803 6 '\0\1\2\0\1\2' >"$d/train-labels-idx1-ubyte"
row "idx: wrong label magic" "train-labels-idx1-ubyte: magic 0x00000803, expected 0x00000801" vit_train --data "$d"
d=$(idx_set overflow); images 0x803 0x7fffffff 0x7fffffff 0x7fffffff 96 >"$d/train-images-idx3-ubyte"
row "idx: dimensions overflowing size_t" "train-images-idx3-ubyte: header sizes overflow" vit_train --data "$d"
d=$(idx_set absurd); images 0x803 0x7fffffff 28 28 96 >"$d/train-images-idx3-ubyte"
row "idx: absurd count, tiny file" "train-images-idx3-ubyte: truncated: the header promises 1683627179248 data bytes, the file holds 96" vit_train --data "$d"
d=$(idx_set zero); images 0x803 6 0 4 96 >"$d/train-images-idx3-ubyte"
row "idx: zero dimension" "train-images-idx3-ubyte: dimension 1 is 0" vit_train --data "$d"
d=$(idx_set big); images 0x803 6 4 0x80000000 96 >"$d/train-images-idx3-ubyte"
row "idx: dimension above INT_MAX" "train-images-idx3-ubyte: dimension 2 is 2147483648" vit_train --data "$d"
d=$(idx_set hdr); be32 0x803 >"$d/t10k-images-idx3-ubyte"; be32 3 >>"$d/t10k-images-idx3-ubyte"
row "idx: truncated header" "t10k-images-idx3-ubyte: header truncated" vit_train --data "$d"
d=$(idx_set cut); images 0x803 6 4 4 95 >"$d/train-images-idx3-ubyte"
row "idx: truncated data" "train-images-idx3-ubyte: truncated: the header promises 96 data bytes, the file holds 95" vit_train --data "$d"
d=$(idx_set extra); labels 0x801 3 '\2\1\0\0' >"$d/t10k-labels-idx1-ubyte"
row "idx: trailing bytes" "t10k-labels-idx1-ubyte: longer than the 3 data bytes" vit_train --data "$d"
d=$(idx_set count); labels 0x801 5 '\0\1\2\0\1' >"$d/train-labels-idx1-ubyte"
row "idx: label count differs" "train-labels-idx1-ubyte: 5 labels, but .*train-images-idx3-ubyte holds 6 images" vit_train --data "$d"
d=$(idx_set size); images 0x803 3 5 4 60 >"$d/t10k-images-idx3-ubyte"
row "idx: test images of another size" "t10k-images-idx3-ubyte: images are 5x4, but .*train-images-idx3-ubyte has 4x4" vit_train --data "$d"
d=$(idx_set missing); rm "$d/t10k-labels-idx1-ubyte"
row "idx: missing labels file" "idx/missing: no t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte.gz" vit_train --data "$d"
# (pixels taken from a gzip file, which does not compress again, so that
# the cut falls inside the data)
d=$(idx_set gz); { be32 0x803; be32 6; be32 4; be32 64; head -c 1536 "$digits"; } | gzip -c |
    head -c 800 >"$d/train-images-idx3-ubyte.gz"
rm "$d/train-images-idx3-ubyte"
row "idx: truncated gzip" "train-images-idx3-ubyte.gz: (truncated|read error)" vit_train --data "$d"
d=$(idx_set wide); labels 0x801 3 '\2\1\5' >"$d/t10k-labels-idx1-ubyte"
row "idx: labels out of the model's range" "other_config_4x4.ckpt: .*6 classes but the model has 2" \
    vit_eval "$bad/other_config_4x4.ckpt" --data "$d"

# ---- PNG class folders (vit_train --data DIR with train/ and test/) -------
# png_set NAME: train/ and test/ with classes a and b of 4x4 grayscale PNGs.
png_set() {
    local d=$tmp/png/$1 s c
    for s in train test; do
        for c in a b; do
            mkdir -p "$d/$s/$c"
            cp "$bad/gray4x4.png" "$d/$s/$c/1.png"
            cp "$bad/gray4x4.png" "$d/$s/$c/2.png"
        done
    done
    echo "$d"
}
d=$(png_set empty); rm "$d/train/b/"*
row "png: empty class folder" "train/b: empty class folder \(no .png, .jpg or .jpeg files\)" vit_train --data "$d"
d=$(png_set noclass); rm -r "$d/test/"*; : >"$d/test/stray.png"
row "png: no class folders" "test: no class subfolders" vit_train --data "$d"
d=$(png_set garbage); echo "not a png" >"$d/train/a/2.png"
row "png: not a PNG" "train/a/2.png: not a PNG file \(bad signature\) \(--skip-bad skips image files that cannot be read\)" vit_train --data "$d"
d=$(png_set cut); head -c 50 "$bad/gray4x4.png" >"$d/train/b/1.png"
row "png: truncated PNG" "train/b/1.png: (corrupt PNG|not a valid PNG)" vit_train --data "$d"
d=$(png_set crc); cp "$bad/bad_crc.png" "$d/test/a/1.png"
row "png: bad chunk CRC" "test/a/1.png: (corrupt PNG|not a valid PNG).*CRC" vit_train --data "$d"
d=$(png_set huge); cp "$bad/huge_header.png" "$d/train/a/1.png"
row "png: absurd dimensions" "train/a/1.png: header claims 100000x100000 pixels, more than its 68 bytes can hold" vit_train --data "$d"
# (images of other sizes or channels are fitted now: tests/test_photos.sh)
d=$(png_set names); mv "$d/test/b" "$d/test/c"
row "png: test classes named differently" "test: class folder 1 is 'c', but in .*train it is 'b'" vit_train --data "$d"
d=$(png_set fit)
row "fit: --image-height alone" "--image-height alone: give --image-width too, or --image-size HxW" \
    vit_train --data "$d" --image-height 32 --channels 1
row "fit: --channels 2" "--channels: expected 1 \(grayscale\) or 3 \(RGB\), got '2'" vit_train --data "$d" --channels 2
row "fit: --image-size 0" "--image-size: expected HxW .* got '0x4'" vit_train --data "$d" --image-size 0x4
row "fit: --image-size with --image-width" "--image-size and --image-height/--image-width: give one of them" \
    vit_train --data "$d" --image-size 8 --image-width 8 --image-height 8
printf 'left\n\nright\nthird\n' >"$tmp/names3.txt"
row "class names: wrong count" "--class-names: .*names3.txt holds 3 names, but the data has 2 classes" \
    vit_train --data "$d" --class-names "$tmp/names3.txt"
row "class names: missing file" "--class-names: .*nonames.txt: cannot open" \
    vit_train --data "$d" --class-names "$tmp/nonames.txt"
row "data: a missing path" "$tmp/nowhere: no such file or folder" vit_train --data "$tmp/nowhere"
mkdir -p "$tmp/flat/a"; cp "$bad/gray5x5.png" "$tmp/flat/a/1.png"
row "data: class folders too small to split" "flat: a test fraction of 0.2 leaves no test images \(too few images per class\)" vit_train --data "$tmp/flat"
mkdir -p "$tmp/nothing/a" "$tmp/nothing/b"
row "data: subfolders without images" "nothing: not a data set .*found 2 subfolders \(.*\), 0 of them holding images, and 0 other files" vit_train --data "$tmp/nothing"

# ---- vit_predict on bad images -----------------------------------------------
cp "$bad/huge_header.png" "$tmp/huge.png"
row "predict: absurd PNG dimensions" "huge.png: header claims 100000x100000 pixels" vit_predict "$good" "$tmp/huge.png"
head -c 60 "$bad/gray4x4.png" >"$tmp/cut.png"
row "predict: truncated PNG" "cut.png: (corrupt PNG|not a valid PNG)" vit_predict "$bad/other_config_4x4.ckpt" "$tmp/cut.png"
row "predict: image of another size" "gray8x8.png: image is 8x8x1 but the model expects 4x4x1" \
    vit_predict "$bad/other_config_4x4.ckpt" "$bad/gray8x8.png"
row "predict: missing image" "$tmp/none.png: no such file or folder" vit_predict "$good" "$tmp/none.png"
row "predict: no image" "no image given" vit_predict "$good"

# ---- checkpoints ------------------------------------------------------------
c=$tmp/ckpt
mkdir "$c"
: >"$c/empty.ckpt"
row "ckpt: empty file" "empty.ckpt': truncated at byte 0" vit_eval "$c/empty.ckpt"
head -c 100 "$good" >"$c/cut.ckpt"
row "ckpt: truncated" "cut.ckpt': truncated at byte 100" vit_eval "$c/cut.ckpt"
cp "$good" "$c/magic.ckpt"; printf 'NOTACKPT' | dd of="$c/magic.ckpt" conv=notrunc 2>/dev/null
row "ckpt: wrong magic" "magic.ckpt': bad magic, not a vit checkpoint" vit_eval "$c/magic.ckpt"
cp "$good" "$c/flip.ckpt"; printf '\x55' | dd of="$c/flip.ckpt" bs=1 seek=3000 conv=notrunc 2>/dev/null
row "ckpt: one byte changed" "flip.ckpt': checksum mismatch" vit_eval "$c/flip.ckpt"
{ cat "$good"; printf 'junk'; } >"$c/long.ckpt"
row "ckpt: bytes appended" "long.ckpt': 4 unexpected bytes after the last tensor" vit_eval "$c/long.ckpt"
row "ckpt: a folder that is not a run's" "checkpoint $c: a folder without last.ckpt, so not a run's folder" vit_eval "$c"
row "ckpt: missing" "cannot open '$c/none.ckpt'" vit_eval "$c/none.ckpt"
row "ckpt: other format version" "version6.ckpt': unsupported format version 6" vit_eval "$bad/version6.ckpt"
row "ckpt: absurd tensor dims" "absurd_dims.ckpt': tensor 'patch.w' dims\[0\] = 4611686018427387904 exceeds the [0-9]+ bytes left" \
    vit_eval "$bad/absurd_dims.ckpt"
row "ckpt: absurd tensor count" "absurd_count.ckpt': tensor count 4294967295 cannot fit" vit_eval "$bad/absurd_count.ckpt"
row "ckpt: config of a huge model" "huge_config.ckpt: the stored config describes [0-9]+ parameters, but the file holds only 228 values" \
    vit_predict "$bad/huge_config.ckpt" "$bad/gray4x4.png"
row "ckpt: garbled config" "bad_config.ckpt:[0-9]+: dim: expected an integer, got 'two'" vit_eval "$bad/bad_config.ckpt"
row "ckpt: NaN value" "nan_value.ckpt': tensor 'patch.b' value \[0\] is not finite" vit_eval "$bad/nan_value.ckpt"
row "ckpt: tensor of the wrong shape" "wrong_shape.ckpt: tensor 'patch.w' dimension 0 is 2, the config needs 4" \
    vit_eval "$bad/wrong_shape.ckpt"
row "ckpt: tensor missing" "missing_tensor.ckpt: tensor 'head.b' is missing" vit_eval "$bad/missing_tensor.ckpt"
row "ckpt: repeated tensor name" "duplicate_name.ckpt': tensor name 'patch.w' appears twice" vit_eval "$bad/duplicate_name.ckpt"
row "ckpt: resume without optimizer state" "weights_only.ckpt: tensor 'adam.m' is missing" \
    vit_train --resume "$bad/weights_only.ckpt" --dim 2 --heads 1 --mlp 2 --data "$(idx_set resume)"
row "ckpt: evaluate on data of another size" "other_config_4x4.ckpt: evaluation images are 8x8x1 but the model expects 4x4x1" \
    vit_eval "$bad/other_config_4x4.ckpt" --data digits
row "ckpt: resume on data of another size" "other_config_4x4.ckpt: the checkpoint's run has image_height = 4, this run asks for 8" \
    vit_train --resume "$bad/other_config_4x4.ckpt"
row "ckpt: resume with another model shape" "good.ckpt: the checkpoint's run has dim = 16, this run asks for 32" \
    vit_train --resume "$good" --dim 32
row "ckpt: resume from a truncated file" "cut.ckpt': truncated at byte 100" vit_train --resume "$c/cut.ckpt"

# ---- config files -------------------------------------------------------------
printf 'dim = 64\nheads four\n' >"$tmp/garbled.cfg"
row "config: no '='" "garbled.cfg:2: expected 'key = value'" vit_train --config "$tmp/garbled.cfg"
printf 'dim = 64\ncolour = blue\n' >"$tmp/unknown.cfg"
row "config: unknown key" "unknown.cfg:2: unknown config key 'colour'" vit_train --config "$tmp/unknown.cfg"
printf 'patch = 4\npatch_stride = 2\ndim = 16\npatch_stride = 4\n' >"$tmp/twice.cfg"
row "config: key given twice" "twice.cfg:4: patch_stride is set twice \(first on line 2\)$" \
    vit_train --config "$tmp/twice.cfg"
printf 'depth = 100000\n' >"$tmp/range.cfg"
row "config: value out of range" "range.cfg:1: depth: 100000 is out of range" vit_train --config "$tmp/range.cfg"
printf 'dim = 64\0\n' >"$tmp/nul.cfg"
row "config: NUL byte" "nul.cfg: not a text file" vit_train --config "$tmp/nul.cfg"
head -c 20000 /dev/zero | tr '\0' '#' >"$tmp/big.cfg"
row "config: too large" "big.cfg: config larger than" vit_train --config "$tmp/big.cfg"
{ printf 'dim = '; head -c 600 /dev/zero | tr '\0' '1'; echo; } >"$tmp/line.cfg"
row "config: line too long" "line.cfg:1: line too long" vit_train --config "$tmp/line.cfg"
row "config: missing" "none.cfg: cannot open config" vit_train --config "$tmp/none.cfg"

# ---- flags out of range -------------------------------------------------------
# (each message whole: the option named once, as typed but with '-')
row "flag: --epochs 0" "^vit_train: --epochs: 0 is out of range \[1, 1000000\]$" vit_train --epochs 0
row "flag: --epochs overflowing long" "^vit_train: --epochs: expected an integer, got '99999999999999999999'$" \
    vit_train --epochs 99999999999999999999
row "flag: --lr -1" "^vit_train: --lr: -1 is out of range \[1e-12, 10\]$" vit_train --lr -1
row "flag: --lr nan" "^vit_train: --lr: expected a number, got 'nan'$" vit_train --lr nan
row "flag: --lr inf" "^vit_train: --lr: expected a number, got 'inf'$" vit_train --lr=inf
row "flag: --min-lr above --lr" "^vit_train: min_lr: 0\.1 exceeds lr 0\.01$" vit_train --lr 0.01 --min-lr 0.1
row "flag: --batch 0" "^vit_train: --batch: 0 is out of range \[1, 1048576\]$" vit_train --batch 0
row "flag: --beta1 1" "^vit_train: --beta1: 1 is out of range \[0, 0\.999999\]$" vit_train --beta1 1
row "flag: --smoothing 1" "^vit_train: --smoothing: 1 is out of range \[0, 0\.99\]$" vit_train --smoothing 1
row "flag: --init-std 0" "^vit_train: --init-std: 0 is out of range \[1e-06, 10\]$" vit_train --init-std 0
row "flag: --init_std=0" "^vit_train: --init-std: 0 is out of range \[1e-06, 10\]$" vit_train --init_std=0
row "flag: --seed -1" "^vit_train: --seed: expected a non-negative integer, got '-1'$" vit_train --seed -1
row "flag: --pool max" "^vit_train: --pool: expected cls or mean, got 'max'$" vit_train --pool max
row "flag: --heads not dividing --dim" "^vit_train: heads: 3 does not divide dim 16$" vit_train --heads 3
row "flag: --patch not dividing the image" "^vit_train: patch: 3 does not divide the 8x8 image$" vit_train --patch 3
row "flag: --threads 0" "^vit_train: --threads: expected an integer in \[1, 256\], got '0'$" vit_train --threads 0
row "flag: --threads 257" "^vit_train: --threads: expected an integer in \[1, 256\], got '257'$" vit_train --threads=257
row "flag: --ckpt-every 0" "^vit_train: --ckpt-every: expected an integer in \[1, [0-9]+\], got '0'$" vit_train --ckpt-every 0
row "flag: --stop-after -2" "^vit_train: --stop-after: expected an integer in \[1, [0-9]+\], got '-2'$" \
    vit_train --stop_after=-2
row "flag: --val -1" "^vit_train: --val: expected an integer in \[0, [0-9]+\], got '-1'$" vit_train --val -1
row "flag: --val larger than the data" "^vit_train: --val 100000 leaves no training images \(of 1437\)$" vit_train --val 100000
row "flag: --out too long" "^vit_train: --out: path longer than 4095 bytes$" vit_train --out "$(printf '%05000d' 0)"
row "flag: a model too large for memory" "out of memory for [0-9]+ parameters" \
    vit_train --dim 65536 --heads 1 --depth 1024 --mlp 1048576
row "flag: unknown" "^vit_train: unknown option --colour \(see --help\)$" vit_train --colour blue
row "flag: unknown, close to a key" "^vit_train: unknown option --dimm; did you mean --dim\?$" vit_train --dimm=8
row "flag: missing value" "^vit_train: --epochs: missing value$" vit_train --epochs
row "flag: value for a flag taking none" "^vit_train: --quiet: takes no value, got '1'$" vit_train --quiet=1
row "eval flag: --split" "^vit_eval: --split: expected test or train, got 'val'$" vit_eval "$good" --split val
row "eval flag: --threads 0" "^vit_eval: --threads: expected an integer in \[1, 256\], got '0'$" vit_eval "$good" --threads=0
row "eval flag: unknown" "^vit_eval: unknown option --colour \(see --help\)$" vit_eval "$good" --colour blue
row "eval flag: missing value" "^vit_eval: --data: missing value$" vit_eval "$good" --data
row "eval: no checkpoint" "no checkpoint given" vit_eval
# A VIT_GEMM the library would not take is refused by every tool before its
# work (the library used to print a warning and run on the default path).
VIT_GEMM=fast row "env: VIT_GEMM=fast (vit_train)" "^vit_train: VIT_GEMM=fast: expected auto(, blas or xsmm|, blas, xsmm or dnnl| or blas \(built without libxsmm\))$" vit_train --data digits
VIT_GEMM=fast row "env: VIT_GEMM=fast (vit_eval)" "^vit_eval: VIT_GEMM=fast: expected auto(, blas or xsmm|, blas, xsmm or dnnl| or blas \(built without libxsmm\))$" vit_eval "$good"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
