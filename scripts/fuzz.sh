#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for FUZZ_SECONDS each (default 60) and prints, per
# target, the executions run and executions per second. The corpus grows in
# fuzz/corpus/<target> from the committed seeds in fuzz/seeds/<target>; a crash stops the
# run and leaves its input in fuzz/artifacts/<target>/.
#
# cargo-fuzz passes unstable (-Z) flags to rustc; RUSTC_BOOTSTRAP lets the project's
# pinned stable toolchain accept them. No sanitizer: Portico forbids unsafe code, and the
# fuzz build keeps debug assertions (overflow checks) on.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${FUZZ_SECONDS:-60}"
targets=(range aws_chunked request)
summary=()
export RUSTC_BOOTSTRAP=1

cargo fuzz build -O -s none -a
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log="$(mktemp)"
    cargo fuzz run -O -s none -a "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 2>&1 | tee "$log" | grep -E "^(#[0-9]+\s+DONE|Done|==|SUMMARY|thread)" || true
    if ! grep -q "^Done " "$log"; then
        echo "fuzz target $target failed; see the output above" >&2
        tail -40 "$log" >&2
        exit 1
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
    summary+=("$(printf '%-12s %12s execs %10s exec/s  (%ss)' "$target" "$runs" "$rate" "$seconds")")
    rm -f "$log"
done
echo
printf '%s\n' "${summary[@]}"
