#!/usr/bin/env bash
# The layering check: every file of src/ and kernels/ may include only headers
# of its own layer or of the layers below it. The order is read from
# docs/ARCHITECTURE.md (its "layers, lowest first:" line), so the document and
# the check cannot drift apart. Public headers (include/zeroshard*.h) and
# system headers are open to every layer. A folder that is not in the order
# fails the check too, so a new folder has to be placed before it is used.
#
# Usage: check_layers.sh <repository root>
set -euo pipefail
root=${1:?usage: check_layers.sh <repository root>}
doc="$root/docs/ARCHITECTURE.md"

order_line=$(grep -m1 '^layers, lowest first:' "$doc" || true)
if [[ -z $order_line ]]; then
    echo "check_layers: $doc has no 'layers, lowest first:' line" >&2
    exit 1
fi
read -r -a layers <<<"${order_line#layers, lowest first:}"
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

# The layer of a file: kernels/..., src/api.c -> api, src/<folder>/... -> folder.
layer_of() {
    local rel=${1#"$root"/}
    case $rel in
    kernels/*) echo kernels ;;
    src/*/*) rel=${rel#src/}; echo "${rel%%/*}" ;;
    src/*) rel=${rel#src/}; echo "${rel%.*}" ;;
    esac
}

violations=0
checked=0
while IFS= read -r -d '' file; do
    own=$(layer_of "$file")
    if [[ -z ${rank[$own]+x} ]]; then
        echo "$file: its layer '$own' is not in the order of $doc" >&2
        violations=$((violations + 1))
        continue
    fi
    line_no=0
    while IFS= read -r line; do
        line_no=$((line_no + 1))
        [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
        header=${BASH_REMATCH[1]}
        checked=$((checked + 1))
        case $header in zeroshard*.h) continue ;; esac
        if [[ $header != */* ]]; then
            echo "$file:$line_no: #include \"$header\" names no folder; write it from src/ or the root (e.g. \"$own/$header\")" >&2
            violations=$((violations + 1))
            continue
        fi
        target=${header%%/*}
        if [[ -z ${rank[$target]+x} ]]; then
            echo "$file:$line_no: #include \"$header\": '$target' is not a layer in $doc" >&2
            violations=$((violations + 1))
        elif ((rank[$target] > rank[$own])); then
            echo "$file:$line_no: $own includes \"$header\" of $target, a layer above it (order: ${layers[*]})" >&2
            violations=$((violations + 1))
        fi
    done <"$file"
done < <(find "$root/src" "$root/kernels" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)

if ((violations > 0)); then
    echo "check_layers: $violations include(s) break the layer order" >&2
    exit 1
fi
echo "check_layers: $checked includes in the order ${layers[*]}: none goes up"
