#!/usr/bin/env bash
# The libraries' ABI is their headers.  Usage:
#   test_symbols.sh INCLUDE_DIR LIBRARY:FLAGS... [--static ARCHIVE...] -- CC...
# e.g. test_symbols.sh include build/src/libvit.so:-Ibuild/include
#        build/src/libvit-f64.so:'-DVIT_DOUBLE -Ibuild/include'
#        --static build/src/libvit.a build/src/libvit-f64.a -- cc
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
# Then, so that one program can link both precisions: no vit-prefixed
# symbol is exported by two of the shared LIBRARYs, and no global symbol
# (hidden helpers included) is defined by two of the static ARCHIVEs.
# CC is meson's C compiler command.  Skipped (77) only when nm is missing.
set -u
incdir=$1
shift
libs=() archives=()
while [ $# -gt 0 ] && [ "$1" != -- ] && [ "$1" != --static ]; do
    libs+=("$1")
    shift
done
if [ $# -gt 0 ] && [ "$1" = --static ]; then
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        archives+=("$1")
        shift
    done
fi
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
# vit/f64.h declares nothing: it selects float64 for the file (and refuses
# to follow a float32 header), so it is left out; FLAGS set the precision.
for h in "${headers[@]}"; do
    [ "${h##*/}" = f64.h ] || printf '#include "vit/%s"\n' "${h##*/}"
done > "$tmp/all.c"

fail=0
n_lib=0 names=()
for spec in "${libs[@]}"; do
    lib=${spec%%:*}
    names+=("${lib##*/}")
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
    cp "$tmp/exported" "$tmp/exported.$n_lib"
    n_lib=$((n_lib + 1))
done

# One process may load all the shared libraries (libvit and libvit-f64):
# no vit-prefixed symbol may be exported by two of them.
shared_overlap() {
    local i j
    for ((i = 0; i < n_lib; i++)); do
        for ((j = i + 1; j < n_lib; j++)); do
            comm -12 "$tmp/exported.$i" "$tmp/exported.$j" | grep '^vit' |
                sed "s|^|${names[i]} ${names[j]} |"
        done
    done
}
shared_overlap > "$tmp/overlap"
if [ -s "$tmp/overlap" ]; then
    fail=1
    while read -r a b s; do
        echo "FAIL $a and $b both export $s (the float64 build's names must be vit_f64_*: see vit/core.h)"
    done < "$tmp/overlap"
elif [ "$n_lib" -gt 1 ]; then
    echo "ok   ${names[*]}: no vit symbol exported by two of them"
fi

# Static archives: every global symbol they define, hidden or not, since
# the linker sees them all; two archives linked into one program must not
# define the same one.
for ((i = 0; i < ${#archives[@]}; i++)); do
    if ! nm -g --defined-only "${archives[i]}" > "$tmp/anm"; then
        echo "FAIL nm failed on ${archives[i]}"
        fail=1
        continue
    fi
    awk 'NF >= 3 && $2 !~ /^[UwvWV]$/ { print $3 }' "$tmp/anm" | sort -u > "$tmp/archive.$i"
done
for ((i = 0; i < ${#archives[@]}; i++)); do
    for ((j = i + 1; j < ${#archives[@]}; j++)); do
        a=${archives[i]##*/} b=${archives[j]##*/}
        comm -12 "$tmp/archive.$i" "$tmp/archive.$j" > "$tmp/aoverlap"
        if [ -s "$tmp/aoverlap" ]; then
            fail=1
            while read -r s; do
                echo "FAIL $a and $b both define $s (a helper of src/ shared between files must be declared in a src/*.h header, which src/f64_internal_names.h renames)"
            done < "$tmp/aoverlap"
        else
            echo "ok   $a and $b define no common global symbol ($(wc -l < "$tmp/archive.$i") and $(wc -l < "$tmp/archive.$j"))"
        fi
    done
done
exit $fail
