#!/usr/bin/env bash
# make test-busy: the distributed tests twice at once, each pass in its own
# ctest tree (so their logs do not mix), so that every test runs on a
# machine the other pass keeps busy (on 2 cores, a load of 2 or more).
# Both passes must pass.
#   tests/run_busy.sh BUILD_DIR [REGEX]     (default: ^test_dist_)
set -u
build="$(cd "$1" && pwd)"
regex="${2:-^test_dist_}"
start=$(date +%s)
pids=()
for lane in a b; do
  dir="$build/busy-$lane"
  mkdir -p "$dir"
  # a ctest tree of its own that runs the build's tests
  echo "subdirs(\"$build\")" > "$dir/CTestTestfile.cmake"
  (cd "$dir" && ctest -R "$regex" --output-on-failure --timeout 900 > "$dir/ctest.log" 2>&1) &
  pids+=($!)
done
fail=0
for i in 0 1; do
  lane=$([ $i = 0 ] && echo a || echo b)
  if ! wait "${pids[$i]}"; then
    fail=1
    echo "test-busy: pass $lane failed:"
    sed -n '/The following tests FAILED/,$p' "$build/busy-$lane/ctest.log"
  fi
  grep -E "tests passed|Total Test time" "$build/busy-$lane/ctest.log" | sed "s/^/test-busy: pass $lane: /"
done
echo "test-busy: $(( $(date +%s) - start ))s (logs: $build/busy-a/ctest.log, $build/busy-b/ctest.log)"
exit $fail
