#!/usr/bin/env bash
# The libraries' ABI is their headers.  Usage:
#   test_symbols.sh INCLUDE_DIR LIBRARY:FLAGS... -- CC...
# e.g. test_symbols.sh include build/src/libvit.so: build/src/libvit-f64.so:-DVIT_DOUBLE -- cc
#
# For each shared LIBRARY, compares two lists of names:
#  - exported: the defined dynamic symbols (`nm -D --defined-only`), functions
#    and data; names starting with '_' (reserved for the toolchain: _init,
#    _fini, sanitizer symbols) are left out;
#  - declared: every `vit_NAME(` (and every `extern ... vit_NAME;`) in
#    INCLUDE_DIR/vit/*.h, read from the compiler's preprocessed output (so
#    comments and #if'd-out code do not count) with FLAGS (e.g. -DVIT_DOUBLE)
#    added.
# It fails listing every symbol exported but not declared (an internal
# helper that lost its `static`, or a shared one missing from the hidden
# visibility) and every function declared but not exported (a declaration
# without a definition, or a header without VIT_BEGIN_DECLS/VIT_END_DECLS).
# CC is meson's C compiler command.  Skipped (77) only when nm is missing.
set -u
incdir=$1
shift
libs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    libs+=("$1")
    shift
done
[ $# -gt 0 ] && shift
cc=("$@")
if [ ${#libs[@]} -eq 0 ] || [ ${#cc[@]} -eq 0 ]; then
    echo "usage: test_symbols.sh INCLUDE_DIR LIBRARY:FLAGS... -- CC..." >&2
    exit 2
fi
if ! command -v nm >/dev/null 2>&1; then
    echo "nm not found: skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

incdir=$(cd "$incdir" && pwd) || exit 1
headers=("$incdir"/vit/*.h)
if [ ! -f "${headers[0]}" ]; then
    echo "FAIL no headers in $incdir/vit" >&2
    exit 1
fi
for h in "${headers[@]}"; do
    printf '#include "vit/%s"\n' "${h##*/}"
done > "$tmp/all.c"

fail=0
for spec in "${libs[@]}"; do
    lib=${spec%%:*}
    flags=()
    [ "$spec" != "$lib" ] && read -r -a flags <<< "${spec#*:}"
    name=${lib##*/}

    # declared: NAME FILE, from the lines the preprocessor attributes to the
    # public headers (line markers `# N "FILE"`).
    if ! "${cc[@]}" -E "${flags[@]}" -I"$incdir" "$tmp/all.c" > "$tmp/pp.c"; then
        echo "FAIL $name: preprocessing the headers failed"
        fail=1
        continue
    fi
    awk -v dir="$incdir/vit/" '
        /^# [0-9]+ "/ { f = $3; gsub(/"/, "", f); inhdr = index(f, dir) == 1; next }
        !inhdr { next }
        {
            line = $0
            while (match(line, /(^|[^A-Za-z0-9_])vit_[A-Za-z0-9_]*[ \t]*\(/)) {
                s = substr(line, RSTART, RLENGTH)
                line = substr(line, RSTART + RLENGTH)
                sub(/^[^v]*/, "", s); sub(/[ \t]*\($/, "", s)
                print s, substr(f, length(dir) + 1)
            }
            if ($0 ~ /^[ \t]*extern[^(]*[^A-Za-z0-9_]vit_[A-Za-z0-9_]*[ \t]*(\[[^]]*\])?[ \t]*;/) {
                s = $0
                sub(/[ \t]*(\[[^]]*\])?[ \t]*;.*$/, "", s); sub(/^.*[^A-Za-z0-9_]/, "", s)
                print s, substr(f, length(dir) + 1)
            }
        }' "$tmp/pp.c" | sort -u -k1,1 > "$tmp/declared"
    cut -d' ' -f1 "$tmp/declared" > "$tmp/declared.names"

    # exported: defined dynamic symbols, not absolute (A) ones.
    if ! nm -D --defined-only "$lib" > "$tmp/nm"; then
        echo "FAIL $name: nm -D failed on $lib"
        fail=1
        continue
    fi
    awk 'NF >= 3 && $2 != "A" { n = $3; sub(/@.*/, "", n); if (n !~ /^_/) print n }' \
        "$tmp/nm" | sort -u > "$tmp/exported"

    comm -23 "$tmp/exported" "$tmp/declared.names" > "$tmp/undeclared"
    comm -13 "$tmp/exported" "$tmp/declared.names" > "$tmp/unexported"
    ne=$(wc -l < "$tmp/exported") nd=$(wc -l < "$tmp/declared.names")
    if [ -s "$tmp/undeclared" ] || [ -s "$tmp/unexported" ]; then
        fail=1
        echo "FAIL $name: $ne symbols exported, $nd names declared in $incdir/vit"
        while read -r s; do
            echo "  exported but not declared in include/vit/: $s"
        done < "$tmp/undeclared"
        while read -r s; do
            echo "  declared but not exported: $s ($(awk -v s="$s" '$1 == s { print $2 }' "$tmp/declared"))"
        done < "$tmp/unexported"
    else
        echo "ok   $name: the $ne exported symbols are the $nd names declared in include/vit/"
    fi
done
exit $fail
