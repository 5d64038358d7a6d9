#!/usr/bin/env bash
# Installs graphrun into a temporary prefix and builds a program against it
# with pkg-config, as a user would: `cc prog.c $(pkg-config --cflags --libs graphrun)`.
set -euo pipefail
build_dir="$1"
src_dir="$2"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
cc -std=c11 -Wall -Werror "$src_dir/examples/basics.c" -o "$prefix/basics" \
  $(pkg-config --cflags graphrun) $(pkg-config --libs graphrun)
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/basics" | grep -q "y = 238"
test -f "$prefix/include/graphrun/graphrun.h"
echo "install: ok ($(ls "$prefix"/lib*/libgraphrun* "$prefix"/lib/*/libgraphrun* 2>/dev/null | wc -l) library files)"
