#!/usr/bin/env bash
# Builds the libraries with clang + libFuzzer instrumentation in build-fuzz/
# and runs one harness for a bounded time: run_fuzz.sh NAME [SECONDS].
# Fails on any crash, leak or sanitizer report. Seeds: examples/*.gr (dsl),
# the examples exported as .grb by build/graphrun when it exists (graph),
# valid frames of every kind written by tests/fuzz/gen_wire_seeds.c (wire),
# small PNG and JPEG files written by tests/fuzz/gen_image_seeds.c (image).
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?harness name, e.g. dsl}
seconds=${2:-60}
dir=${FUZZ_BUILD_DIR:-build-fuzz}
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g -O1 -Wno-unknown-warning-option"
if [ ! -f $dir/CMakeCache.txt ]; then
  cmake -S . -B $dir -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DBUILD_TESTING=OFF -DCMAKE_C_FLAGS="$flags" >/dev/null
fi
cmake --build $dir --target graphrun -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
libs="$dir/libgraphrun.a $(pkg-config --libs openblas sqlite3 zlib libxxhash jansson libcrypto libssl libpng libjpeg) \
      $(pkg-config --libs libevent libevent_pthreads 2>/dev/null || true) \
      $(pkg-config --libs msgpack-c 2>/dev/null || pkg-config --libs msgpack 2>/dev/null || true) \
      -ldnnl -lpthread -lm"
clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1 \
      -I. -Ifrontend tests/fuzz/fuzz_$name.c $libs -o $dir/fuzz_$name
mkdir -p $dir/corpus_$name
if [ "$name" = wire ]; then
  clang -fsanitize=fuzzer-no-link,address,undefined -g -O1 -I. -Ifrontend \
        tests/fuzz/gen_wire_seeds.c $libs -o $dir/gen_wire_seeds
  $dir/gen_wire_seeds $dir/corpus_$name
elif [ "$name" = image ]; then
  clang -fsanitize=fuzzer-no-link,address,undefined -g -O1 -I. -Ifrontend \
        tests/fuzz/gen_image_seeds.c $libs -o $dir/gen_image_seeds
  $dir/gen_image_seeds $dir/corpus_$name
elif [ "$name" = graph ]; then
  for f in examples/*.gr; do
    [ -x build/graphrun ] && build/graphrun export "$f" -o "$dir/corpus_$name/$(basename "$f" .gr).grb" \
      >/dev/null 2>&1 || true
  done
else
  cp examples/*.gr $dir/corpus_$name/ 2>/dev/null || true
fi
echo "fuzz-$name: running for ${seconds}s"
# -rss_limit_mb: graphs are small; -timeout: one input must not take seconds
$dir/fuzz_$name -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 $dir/corpus_$name 2>&1 | tail -n 25
