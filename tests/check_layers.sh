#!/usr/bin/env bash
# Dependencies point down (docs/internals.md, "Folders"): each folder may include project
# headers only from itself and the folders below it, and only through their
# face headers when crossing a folder boundary: the public face (gr_*.h,
# installed) or the engine face (FOLDER/FOLDER_engine.h, not installed). With the build's
# object folder as $1, the calls between a folder's files are checked too.
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
    elif [ "$top" != "$dir" ] && [[ "$(basename "$inc")" != gr_*.h ]] &&
      [ "$(basename "$inc")" != "${top}_engine.h" ]; then
      echo "layering: $file includes $inc, an internal header of $top/ (use its face header, or its engine face ${top}/${top}_engine.h)"
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
# Files call down, not around (with the build's object folder as $1): inside
# each group below, the calls between files (from the objects' symbols) form
# no circle; and the DSL's parser (dsl_lex, dsl_parse) calls no later stage.
objs="${1:-}"
calls() { # calls DIR REGEX: "caller callee" for the files of DIR matching REGEX
  local d="$objs/$1" o f
  for o in "$d"/*.c.o; do
    f="$(basename "$o" .c.o)"
    grep -qE "^($2)\$" <<<"$f" || continue
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 {print "D", $3, f}'
    nm -u "$o" | awk -v f="$f" '{print "U", $2, f}'
  done | awk '$1 == "D" {d[$2] = $3} $1 == "U" {u[n++] = $2 " " $3}
    END {for (i = 0; i < n; i++) {split(u[i], a, " "); if ((a[1] in d) && d[a[1]] != a[2]) print a[2], d[a[1]]}}' |
    sort -u
}
if [ -n "$objs" ]; then
  for group in "core:exec_.*|executor.*" "checkpoints:.*" "frontend:dsl_.*"; do
    dir="${group%%:*}"
    files="${group#*:}"
    if [ "$dir" = frontend ]; then # the parser's stage only
      while read -r a b; do
        case "$a" in dsl_lex | dsl_parse) ;; *) continue ;; esac
        case "$b" in dsl_lex | dsl_parse) continue ;; esac
        echo "circles: frontend/$a.c (the parser) calls frontend/$b.c, a later stage"
        fail=1
      done < <(calls "$dir" "$files")
      continue
    fi
    loop="$(calls "$dir" "$files" | tsort 2>&1 >/dev/null | grep -v 'input contains a loop' |
      sed 's/^tsort: //' | tr '\n' ' ')"
    if [ -n "$loop" ]; then
      echo "circles: $dir/ files call each other in a circle: $loop"
      fail=1
    fi
  done
fi
# The installed headers (gr_*.h; the user's API) include only installed
# headers: an engine header (the engine face, core/core_engine.h, and what it
# includes) is never installed through one.
for h in "$root"/*/gr_*.h "$root"/frontend/graphrun.h; do
  [[ "$h" == *_internal.h ]] && continue
  while IFS= read -r inc; do
    if [[ "$(basename "$inc")" != gr_*.h ]]; then
      echo "installed: ${h#"$root"/} (installed) includes $inc, which is not installed"
      fail=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$h")
done
if [ $fail = 0 ]; then echo "layering: ok"; fi
exit $fail
