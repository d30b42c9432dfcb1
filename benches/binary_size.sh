#!/usr/bin/env bash
# The size of the release binary users run (issue 31), and of the same code built without the
# release profile's size settings, for comparison. Prints figures; asserts nothing.
#   bash benches/binary_size.sh            # the release profile only
#   DEPUTY_BENCH_COMPARE=1 bash benches/binary_size.sh   # also the bench profile (no LTO, not stripped)
set -euo pipefail
cd "$(dirname "$0")/.."
size_of() { stat -c %s "$1"; }
mb() { awk -v bytes="$1" 'BEGIN { printf "%.1f MB", bytes / 1000000 }'; }

cargo build --release --locked --quiet
release=$(size_of target/release/deputy)
echo "binary_size: release (opt-level s and z, strip, fat LTO, 1 codegen unit, build.rs's link settings): $(mb "$release") ($release bytes)"
# Where the bytes are, by section (binutils' readelf, where the machine has it): code, unwind
# tables, read-only data, relocations.
if command -v readelf > /dev/null; then
  readelf -S -W target/release/deputy | sed 's/^ *\[ *[0-9]*\] *//' |
    while read -r name _type _address _offset size _rest; do
      case "$name" in
        .text|.eh_frame|.eh_frame_hdr|.gcc_except_table|.rodata|.data.rel.ro|.rela.dyn|.relr.dyn)
          echo "binary_size:   $name $(mb $((16#$size)))" ;;
      esac
    done
fi

if [ "${DEPUTY_BENCH_COMPARE:-0}" = 1 ]; then
  # The bench profile: the release opt-levels and build.rs's link flags, but thin local LTO and
  # 16 codegen units, so the same code without whole-program optimisation.
  # Its own target directory: the bench profile writes to `release/`, which it would replace.
  cargo build --profile bench --locked --quiet --bin deputy --target-dir target/size-compare
  before=$(size_of target/size-compare/release/deputy)
  echo "binary_size: bench profile (the release opt-levels, thin local LTO, 16 codegen units, symbols kept): $(mb "$before") ($before bytes)"
fi
