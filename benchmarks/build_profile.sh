#!/usr/bin/env bash
# What a build of the extension spent its time on, from ninja's log in the build folder: the span
# from the first compile's start to the last step's end, the CPU seconds of all steps, and the
# slowest units. A span near the slowest unit means the build waits on that unit (splitting it
# would shorten every build); a span near CPU seconds / cores means it is bound by the cores.
#   bash benchmarks/build_profile.sh [TREE]      (TREE: the source tree built, default .)
log=$(ls -t "${1:-.}"/build/*/.ninja_log 2>/dev/null | head -1)
[ -n "$log" ] || { echo "build_profile: no ninja log under ${1:-.}/build"; exit 0; }
awk '!/^#/ {s = $1 / 1000; e = $2 / 1000; if (n == 0 || s < lo) lo = s; if (e > hi) hi = e; cpu += e - s; n++
            d[n] = e - s; t[n] = $4}
     END {printf "build steps: %d, span %.0f s, %.0f CPU s, %d cores\n", n, hi - lo, cpu, '"$(nproc)"'
          for (k = 0; k < 5; k++) {m = 0; for (i = 1; i <= n; i++) if (d[i] > d[m] || m == 0) m = i
                                   if (m && d[m] >= 0) {sub(/.*\//, "", t[m]); printf "  %5.1f s %s\n", d[m], t[m]; d[m] = -1}}}' "$log"
