#!/usr/bin/env bash
# System packages the test suite needs: kcat (Debian's, librdkafka 2.0) for the client-compatibility tests,
# PostgreSQL and Redis (server binaries; tests run their own throwaway servers) and a Java runtime for Spark.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
exec bash "$(dirname "$0")/apt-install.sh" ${need[@]+"${need[@]}"}
