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
# bare file names (no folder) in the docs, and Markdown files named in the
# sources' comments: each must be a file of the repository or one the build
# writes (a name in CMakeLists.txt or cmake/); user files in examples
# (prog.c) and system headers are listed here.
tracked="$(git ls-files 2>/dev/null || find . -type f -not -path './build*' | sed 's|^\./||')"
known="$( { echo "$tracked" | sed 's|.*/||'; grep -hoE '[A-Za-z0-9_]+\.c\b' CMakeLists.txt cmake/*; \
  printf '%s\n' prog.c stdio.h stdlib.h; } | sort -u)"
# (the missing names: comm of the sorted name lists)
while IFS= read -r n; do
  echo "docs: $(grep -lw -- "$n" "${docs[@]}" | head -1) names $n, which is in no folder of the repository"
  fail=1
done < <(comm -23 <(grep -hoE '(^|[^/A-Za-z0-9_.-])[A-Za-z0-9_][A-Za-z0-9_.-]*\.(c|h|md|sh|py)\b' "${docs[@]}" |
  sed -E 's/^[^A-Za-z0-9_]//' | grep -vE 'NAME|^_' | sort -u) <(echo "$known"))
code="$(grep -E '\.(c|h|sh|txt|cmake)$|Makefile' <<<"$tracked")"
while IFS= read -r n; do
  echo "docs: $(xargs grep -lw -- "$n" <<<"$code" | head -1) names $n, which is not in the repository"
  fail=1
done < <(comm -23 <(xargs grep -hoE '\b[A-Za-z0-9_.-]+\.md\b' <<<"$code" | sort -u) <(echo "$known"))
# function names: every gr_NAME, and every NAME_kernel or NAME_shape (an op's
# functions), the docs name is defined or declared in the sources (or is a
# file's name: cmake/gr_embed.cmake); a prefix (gr_attr_) stands for a family.
names='\bgr_[a-z0-9_]+\b|\b[a-z][a-z0-9]*(_[a-z0-9]+)*_(kernel|shape)\b'
while IFS= read -r f; do
  echo "docs: $(grep -lw -- "$f" "${docs[@]}" | head -1) names $f, which is nowhere in the sources"
  fail=1
done < <(comm -23 <(grep -hoE "$names" "${docs[@]}" | grep -v '_$' | sort -u) \
  <(grep -E '\.(c|h|cmake)$' <<<"$tracked" | xargs grep -hoE '\b[A-Za-z0-9_]+\b' | sort -u))
if [ $fail = 0 ]; then echo "docs: ok"; fi
exit $fail
