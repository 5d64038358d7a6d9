#!/usr/bin/env bash
# Dependencies point down (DESIGN.md §1): each folder may include project
# headers only from itself and the folders below it, and only through their
# face headers (gr_*.h) when crossing a folder boundary.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
declare -A allowed=(
  [core]="core"
  [ops]="core ops"
  [placer]="core ops placer"
  [checkpoints]="core checkpoints"
  [distributed]="core ops placer checkpoints distributed"
  [frontend]="core ops placer distributed checkpoints frontend"
)
fail=0
for dir in "${!allowed[@]}"; do
  [ -d "$root/$dir" ] || continue
  while IFS= read -r line; do
    file="${line%%:*}"
    inc="$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")"
    [ -n "$inc" ] || continue
    top="${inc%%/*}"
    [ "$top" = "$inc" ] && continue # same-folder include without a path
    ok=0
    for a in ${allowed[$dir]}; do [ "$top" = "$a" ] && ok=1; done
    if [ $ok = 0 ]; then
      echo "layering: $file includes $inc (${dir}/ may use: ${allowed[$dir]})"
      fail=1
    elif [ "$top" != "$dir" ] && [[ "$(basename "$inc")" != gr_*.h ]]; then
      echo "layering: $file includes $inc, an internal header of $top/ (use its face header)"
      fail=1
    fi
  done < <(grep -H '#include "' "$root/$dir"/*.[ch] 2>/dev/null)
done
if [ $fail = 0 ]; then echo "layering: ok"; fi
exit $fail
