#!/usr/bin/env bash
# The docs tell the truth about the tree: every source path named in docs/
# and the README exists, every relative link between them leads to a file,
# and every `make TARGET` they name (in backquotes or as a command line of
# a code block) is a target of the Makefile (bench-NAME: a benchmark program
# tests/bench/bench_NAME.c, a '-' in NAME a '_').
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
fail=0
docs=(README.md docs/*.md)
while IFS= read -r p; do
  case "$p" in *NAME*|*/N.*) continue ;; esac # placeholders
  if [ ! -e "$p" ]; then
    echo "docs: $(grep -l -- "$p" "${docs[@]}" | head -1) names $p, which does not exist"
    fail=1
  fi
done < <(grep -hoE '\b(core|ops|placer|checkpoints|distributed|frontend|tests|examples|docs|cmake)/[A-Za-z0-9_./-]+\.(c|h|gr|md|json|py|sh|txt|cmake|in)\b' "${docs[@]}" | sort -u)
# relative Markdown links: [text](target), from the linking file's folder
for d in "${docs[@]}"; do
  while IFS= read -r target; do
    path="${target%%#*}"
    [ -n "$path" ] || continue # an anchor in the same file
    if [ ! -e "$(dirname "$d")/$path" ]; then
      echo "docs: $d links to $target, which does not exist"
      fail=1
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$d" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^[a-z]+:')
done
while IFS= read -r t; do
  case "$t" in
    bench-*) b="${t#bench-}" && [ -e "tests/bench/bench_${b//-/_}.c" ] && continue ;;
    *) grep -qE "^${t}:|^\.PHONY:.*\b${t}\b" Makefile && continue ;;
  esac
  echo "docs: \`make $t\` is named in $(grep -l -- "make $t" "${docs[@]}" | head -1) but is no target"
  fail=1
done < <(grep -hoE '(`|^ *(\$ )?)make [a-z][a-z0-9-]*[a-z0-9]' "${docs[@]}" | sed -E 's/^.*make //' | sort -u)
if [ $fail = 0 ]; then echo "docs: ok"; fi
exit $fail
