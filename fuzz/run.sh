#!/usr/bin/env bash
# The compiled text steps built with AddressSanitizer and UndefinedBehaviorSanitizer, then
# fuzzed for a bounded time (fuzz/fuzz_native.py): any sanitizer report, or a crash, fails.
# Usage: bash fuzz/run.sh [SECONDS] [PYTHON]  (from the repository's root; .ci/run runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
python="${2:-.venv/bin/python}"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
CFLAGS="$flags" LDFLAGS="$flags" "$python" setup.py -q build_ext \
    --build-lib "$build/lib" --build-temp "$build/tmp" >"$build/build.log" 2>&1 \
    || { cat "$build/build.log"; exit 1; }
# Python itself is not instrumented: the sanitizer's runtime is loaded first, and every Python
# object comes from malloc (PYTHONMALLOC), so a read past a bytes object's end is seen too.
# Leaks are Python's own (interned objects at exit), not the steps'.
LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
PYTHONMALLOC=malloc \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    "$python" fuzz/fuzz_native.py "$build/lib" --seconds "$seconds"
