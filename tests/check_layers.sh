#!/usr/bin/env bash
# Dependencies point down (docs/internals.md, "Folders"): each folder may include project
# headers only from itself and the folders below it, and only through their
# face headers (gr_*.h) when crossing a folder boundary.
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
declare -A allowed=(
  [core]="core"
  [ops]="core ops"
  [passes]="core ops passes"
  [placer]="core ops placer"
  [checkpoints]="core checkpoints"
  [distributed]="core ops placer checkpoints distributed"
  [frontend]="core ops passes placer distributed checkpoints frontend"
  [frontend/cli]="core ops passes placer distributed checkpoints frontend frontend/cli"
)
# Each folder's face is its umbrella header (the one named after the folder,
# or gr_dsl.h for frontend/) and the gr_*.h headers it includes; every other
# header of the folder is internal (*_internal.h or without the gr_ prefix).
declare -A umbrella=(
  [core]="gr_core.h" [ops]="gr_ops.h" [passes]="gr_passes.h" [placer]="gr_placer.h"
  [checkpoints]="gr_checkpoints.h" [distributed]="gr_distributed.h" [frontend]="gr_dsl.h"
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
for dir in "${!umbrella[@]}"; do
  face="$root/$dir/${umbrella[$dir]}"
  for h in "$root/$dir"/gr_*.h; do
    [ "$h" = "$face" ] && continue
    if ! grep -q "#include \"$dir/$(basename "$h")\"" "$face"; then
      echo "faces: $dir/$(basename "$h") is a gr_ header that $dir/${umbrella[$dir]} does not include (include it there, or make it internal)"
      fail=1
    fi
  done
done
if [ $fail = 0 ]; then echo "layering: ok"; fi
exit $fail
