#!/usr/bin/env bash
# libgraphrun.so exports only the public API: every symbol it defines
# dynamically is a gr_ name declared in an installed header (the version
# script cmake/gr_exports.cmake writes from them); and the installed headers
# are the ones tests/installed_headers.txt lists (the user's API: adding a
# header to it is a decision, made there).
set -u
lib="$1"
map="$2"
installed="${3:-}"
expected="${4:-}"
if [ -n "$installed" ]; then
  d="$(diff <(sort "$expected") <(sort "$installed"))"
  if [ -n "$d" ]; then
    echo "exports: the installed headers differ from tests/installed_headers.txt (< listed, > installed):"
    echo "$d"
    exit 1
  fi
  echo "exports: $(wc -l <"$installed") installed headers, as tests/installed_headers.txt lists"
fi
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
