#!/usr/bin/env bash
# System packages the benchmarks need beyond the tests': librdkafka's headers and a C compiler for
# benchmarks/c/perf.c (the C client the broker is measured with).
set -euo pipefail

need=()
[ -f /usr/include/librdkafka/rdkafka.h ] || need+=(librdkafka-dev)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
exec bash "$(dirname "$0")/apt-install.sh" ${need[@]+"${need[@]}"}
