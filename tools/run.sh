#!/bin/bash
# Set up a fresh Debian 12 machine (as root) and run the demo or the tests.
#
#   tools/run.sh demo    install, then run the demo
#   tools/run.sh test    install, then run the whole test suite and lint
#
# Installs the Debian packages listed in bindep.txt (only the missing ones),
# a virtualenv in .venv and the Python packages pinned by
# upper-constraints.txt. Run it again at will: what is there is kept.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
venv=${NUMA_OVERHEAD_VENV:-$top/.venv}
python=${PYTHON:-python3}

log() { printf '==> %s\n' "$*" >&2; }

install_debian_packages() {
    local profile=$1 missing=() pkg
    # bindep.txt lines: "name [platform:dpkg ...]"; "test" marks packages
    # only the tests need.
    while read -r pkg; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
            | grep -q "install ok installed" || missing+=("$pkg")
    done < <(awk -v profile="$profile" '
        /^[[:space:]]*(#|$)/ { next }
        /platform:dpkg/ && (profile == "test" || $0 !~ / test\]/) {
            print $1 }' bindep.txt)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing Debian packages: ${missing[*]}"
        if [ "$(id -u)" -ne 0 ]; then
            echo "run as root, or install: ${missing[*]}" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

install_python_packages() {
    if [ ! -x "$venv/bin/python" ]; then
        log "creating virtualenv $venv"
        "$python" -m venv "$venv"
    fi
    local stamp="$venv/.installed" want
    want=$(cat requirements.txt test-requirements.txt upper-constraints.txt \
           setup.cfg | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    log "installing Python packages into $venv (pinned by upper-constraints.txt)"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -c upper-constraints.txt \
        -r requirements.txt -r test-requirements.txt
    "$venv/bin/pip" install -q -c upper-constraints.txt --no-deps -e .
    echo "$want" > "$stamp"
}

ensure_rabbitmq() {
    if (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        return
    fi
    log "starting RabbitMQ"
    rabbitmq-server -detached || true
    for _ in $(seq 1 60); do
        (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && return
        sleep 1
    done
    echo "RabbitMQ did not start on 127.0.0.1:5672" >&2
    exit 1
}

case "${1:-}" in
    demo)
        shift
        install_debian_packages run
        install_python_packages
        exec "$venv/bin/nova-numa-overhead" demo "$@"
        ;;
    test)
        shift
        install_debian_packages test
        install_python_packages
        ensure_rabbitmq
        log "flake8 + hacking"
        "$venv/bin/flake8" nova_numa_overhead tests benchmarks
        log "tests: unit, functional (Nova in-process), integration (RabbitMQ)"
        out=$(mktemp)
        trap 'rm -f "$out"' EXIT
        rc=0
        # Nova's functional tests monkey-patch the worker processes with
        # eventlet: they run in a stestr run of their own.
        "$venv/bin/stestr" --test-path ./tests/unit run "$@" | tee "$out" || rc=$?
        "$venv/bin/stestr" --test-path ./tests/integration run "$@" | tee -a "$out" || rc=$?
        "$venv/bin/stestr" --test-path ./tests/functional run "$@" | tee -a "$out" || rc=$?
        count() {
            sed -n "s/^ - $1: \([0-9]*\)$/\1/p" "$out" | awk '{s += $1} END {print s + 0}'
        }
        printf '%s passed, %s failed, %s skipped\n' \
            "$(count Passed)" "$(count Failed)" "$(count Skipped)"
        exit "$rc"
        ;;
    *)
        echo "usage: $0 demo|test" >&2
        exit 2
        ;;
esac
