#!/usr/bin/env bash
# libgraphrun.so exports only the public API: every symbol it defines
# dynamically is a gr_ name declared in an installed header (the version
# script cmake/gr_exports.cmake writes from them).
set -u
lib="$1"
map="$2"
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u |
  while read -r sym; do
    case "$sym" in
      gr_*) grep -qx "    $sym;" "$map" || echo "$sym (not in an installed header)" ;;
      _init | _fini | "") ;;
      *) echo "$sym" ;;
    esac
  done)
if [ -n "$bad" ]; then
  echo "exports: libgraphrun.so exports symbols outside the public API:"
  echo "$bad"
  exit 1
fi
echo "exports: ok ($(nm -D --defined-only "$lib" | wc -l) symbols, all public gr_ API)"
