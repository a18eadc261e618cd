#!/usr/bin/env bash
# Run HERE (the development machine), in the repository, before a device call: fills the
# ignored carry folder gpu_carry/ with what the GPU machine lacks, checks it, and checks that
# the working tree plus the carry stays under the device tool's 64 MiB limit.
#
#   gpu_carry/wheels/   tomli-w, blksprs, stanford-stk (pure-Python wheels, from ../shared/wheels)
#   gpu_carry/data/     MNIST/raw/*.gz and wikitext-2/*.txt (from $SEQ2D_DATA or ../shared/data)
#
# Usage: bash benchmarks/gpu/prepare.sh        (then name gpu_carry in the device call's carry)
# Env:   SEQ2D_DATA (data root), SEQ2D_WHEELS (wheel folder), SEQ2D_CARRY_LIMIT_MIB (default 64)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
shared=$(cd .. && pwd)/shared
data_src=${SEQ2D_DATA:-$shared/data}
wheel_src=${SEQ2D_WHEELS:-$shared/wheels}
limit_mib=${SEQ2D_CARRY_LIMIT_MIB:-64}
carry=gpu_carry

if ! git check-ignore -q "$carry/"; then
    echo "error: $carry/ is not ignored by git (add '/$carry/' to .gitignore): it would travel twice" >&2
    exit 1
fi
for f in MNIST/raw/train-images-idx3-ubyte.gz MNIST/raw/train-labels-idx1-ubyte.gz \
         MNIST/raw/t10k-images-idx3-ubyte.gz MNIST/raw/t10k-labels-idx1-ubyte.gz \
         wikitext-2/train.txt wikitext-2/valid.txt wikitext-2/test.txt; do
    [ -f "$data_src/$f" ] || { echo "error: $data_src/$f is missing (set SEQ2D_DATA)" >&2; exit 1; }
done
wheels=(tomli_w-1.2.0-py3-none-any.whl blksprs-2.5-py3-none-any.whl stanford_stk-0.7.1-py3-none-any.whl)
for w in "${wheels[@]}"; do
    [ -f "$wheel_src/$w" ] || { echo "error: $wheel_src/$w is missing (set SEQ2D_WHEELS)" >&2; exit 1; }
done

rm -rf "${carry:?}/wheels" "${carry:?}/data"
mkdir -p "$carry/wheels" "$carry/data/MNIST/raw" "$carry/data/wikitext-2"
for w in "${wheels[@]}"; do cp "$wheel_src/$w" "$carry/wheels/"; done
cp "$data_src"/MNIST/raw/*-ubyte.gz "$carry/data/MNIST/raw/"
cp "$data_src"/wikitext-2/{train,valid,test}.txt "$carry/data/wikitext-2/"
[ -f "$data_src/SHA256SUMS" ] && cp "$data_src/SHA256SUMS" "$carry/data/"
chmod -R u+w "$carry"

# checksums: the data's own SHA256SUMS (only the files we carry), the wheels' from their README
if [ -f "$carry/data/SHA256SUMS" ]; then
    (cd "$carry/data" && grep -E ' \*?(MNIST/raw/|wikitext-2/)' SHA256SUMS | sha256sum -c --quiet -) \
        || { echo "error: carried data do not match SHA256SUMS" >&2; exit 1; }
    echo "data checksums: ok"
fi
if [ -f "$wheel_src/README.md" ]; then
    (cd "$carry/wheels" && grep -E '^[0-9a-f]{64}  .*\.whl$' "$wheel_src/README.md" | sha256sum -c --quiet -) \
        || { echo "error: carried wheels do not match the checksums in $wheel_src/README.md" >&2; exit 1; }
    echo "wheel checksums: ok"
fi

# what travels: tracked + untracked-not-ignored files (as they are on disk), plus the carry
tree_bytes=$(git ls-files -z --cached --others --exclude-standard \
    | python3 -c 'import os, sys; print(sum(os.path.getsize(p) for p in sys.stdin.buffer.read().decode().split("\0") if p and os.path.isfile(p)))')
carry_bytes=$(find "$carry" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
total=$((tree_bytes + carry_bytes))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "working tree (tracked + untracked-not-ignored): $(mib "$tree_bytes")"
echo "carry $carry/: $(mib "$carry_bytes") ($(find "$carry" -type f | wc -l) files)"
echo "total that travels: $(mib "$total") of $limit_mib MiB"
if [ "$total" -gt $((limit_mib * 1048576)) ]; then
    echo "error: over the device tool's $limit_mib MiB limit; ignore or remove large untracked files, or carry less" >&2
    exit 1
fi
echo "ready: name \"$carry\" in the device call's carry list"
