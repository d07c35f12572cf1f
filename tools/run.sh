#!/bin/bash
# Set up a fresh Debian 12 machine (as root) and run the demo, the tests or
# a one-machine OpenStack cloud.
#
#   tools/run.sh demo    install, then run the demo
#   tools/run.sh test    install, then run the whole test suite and lint
#   tools/run.sh cloud [up|scenario|down] [--short]
#                        install, bring up keystone, glance, placement,
#                        neutron, nova and the agent, then drive them with
#                        the openstack CLI (tools/cloud/cloud.sh)
#
# Installs the Debian packages listed in bindep.txt (only the missing ones),
# a virtualenv in .venv (.venv-cloud for the cloud) and the Python packages
# pinned by upper-constraints.txt. Run it again at will: what is there is
# kept.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
venv=${NUMA_OVERHEAD_VENV:-$top/.venv}
cloud_venv=${NUMA_OVERHEAD_CLOUD_VENV:-$top/.venv-cloud}
python=${PYTHON:-python3}

log() { printf '==> %s\n' "$*" >&2; }

install_debian_packages() {
    local profile=$1 missing=() pkg
    # bindep.txt lines: "name [platform:dpkg profile...]"; a line with
    # profiles ("test", "cloud") is only for those commands.
    while read -r pkg; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
            | grep -q "install ok installed" || missing+=("$pkg")
    done < <(awk -v profile="$profile" '
        /^[[:space:]]*(#|$)/ || !/platform:dpkg/ { next }
        {
            line = $0
            sub(/.*\[/, "", line); sub(/\].*/, "", line)
            n = split(line, words, " ")
            wanted = (n == 1)
            for (i = 2; i <= n; i++) if (words[i] == profile) wanted = 1
            if (wanted) print $1
        }' bindep.txt)
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

# The cloud's own virtualenv: nova, placement, keystone, glance, neutron
# and the openstack CLI beside the plugin, so that the test venv's pins are
# never disturbed.
install_cloud_python_packages() {
    if [ ! -x "$cloud_venv/bin/python" ]; then
        log "creating virtualenv $cloud_venv"
        "$python" -m venv "$cloud_venv"
    fi
    local stamp="$cloud_venv/.installed" want
    want=$(cat requirements.txt tools/cloud/requirements.txt \
           upper-constraints.txt setup.cfg | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    log "installing the cloud's Python packages into $cloud_venv"
    "$cloud_venv/bin/pip" install -q --upgrade pip
    "$cloud_venv/bin/pip" install -q -c upper-constraints.txt \
        -r requirements.txt -r tools/cloud/requirements.txt \
        libvirt-python numpy
    "$cloud_venv/bin/pip" install -q -c upper-constraints.txt --no-deps -e .
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

# The tests/numa group: one stestr worker inside the 4-node VM of
# tools/numa-vm.sh, its subunit stream loaded by stestr here. Arguments
# are stestr filters, as for the other groups.
numa_tests() {
    local list=()
    # The VM sees the checkout read-only: compile what it imports first.
    "$venv/bin/python" -m compileall -q nova_numa_overhead tests >/dev/null
    if [ $# -gt 0 ]; then
        "$venv/bin/stestr" --test-path ./tests/numa list "$@" \
            >"$numa_list" || return
        [ -s "$numa_list" ] || return 0
        list=(--load-list "$numa_list")
    fi
    tools/numa-vm.sh "$venv/bin/python" -m stestr.subunit_runner.run \
        discover -t ./ ./tests/numa "${list[@]}" |
        "$venv/bin/stestr" --test-path ./tests/numa load --force-init \
            --subunit-trace || return
    # stestr load exits 0 whatever the tests did (its command drops the
    # result): the run it just stored says.
    "$venv/bin/stestr" --test-path ./tests/numa last >/dev/null
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
        out=$(mktemp)
        numa_list=$(mktemp)
        cloud_log=$(mktemp)
        cloud_install=
        # Whatever ends the run (a lint failure included), the background
        # install below is waited for: no apt or pip left running.
        # (|| true: under set -e a failing wait would end the trap early
        # and replace the run's exit status with the install's.)
        trap 'if [ -n "$cloud_install" ]; then wait "$cloud_install" || true
              fi
              rm -f "$out" "$numa_list" "$cloud_log"' EXIT
        # The cloud's packages install while the unit tests run; the
        # integration tests wait for them (both use RabbitMQ and time).
        if [ -z "${NUMA_OVERHEAD_SKIP_CLOUD:-}" ] && [ "$(id -u)" -eq 0 ]
        then
            (install_debian_packages cloud &&
                install_cloud_python_packages) >"$cloud_log" 2>&1 &
            cloud_install=$!
        fi
        log "flake8 + hacking"
        "$venv/bin/flake8" nova_numa_overhead tests benchmarks tools/cloud
        log "tests: unit, integration (RabbitMQ), functional (Nova in-process)"
        rc=0
        # Nova's functional tests monkey-patch the worker processes with
        # eventlet: they run in a stestr run of their own.
        "$venv/bin/stestr" --test-path ./tests/unit run "$@" | tee "$out" || rc=$?
        if [ -n "$cloud_install" ] && ! wait "$cloud_install"; then
            # The cloud test installs again and says why it failed.
            log "installing the cloud's packages failed:"
            tail -n 20 "$cloud_log" >&2
        fi
        cloud_install=
        "$venv/bin/stestr" --test-path ./tests/integration run "$@" | tee -a "$out" || rc=$?
        "$venv/bin/stestr" --test-path ./tests/functional run "$@" | tee -a "$out" || rc=$?
        log "tests: nova (Nova's own functional tests with the plugin on)"
        "$venv/bin/stestr" --test-path ./tests/nova run \
            --exclude-list tests/nova/exclude.txt "$@" | tee -a "$out" || rc=$?
        log "tests: numa (a 4-node kernel under QEMU, tools/numa-vm.sh)"
        # NUMA_OVERHEAD_SKIP_NUMA=1 skips it (it boots a VM under TCG).
        if [ "${NUMA_OVERHEAD_SKIP_NUMA:-0}" != 1 ]; then
            numa_tests "$@" | tee -a "$out" || rc=$?
        fi
        log "tests: cloud (tools/run.sh cloud --short)"
        # The one-machine cloud: installs and starts its own services
        # (NUMA_OVERHEAD_SKIP_CLOUD=1 skips it).
        "$venv/bin/stestr" --test-path ./tests/cloud run "$@" | tee -a "$out" || rc=$?
        count() {
            sed -n "s/^ - $1: \([0-9]*\)$/\1/p" "$out" | awk '{s += $1} END {print s + 0}'
        }
        printf '%s passed, %s failed, %s skipped\n' \
            "$(count Passed)" "$(count Failed)" "$(count Skipped)"
        exit "$rc"
        ;;
    cloud)
        shift
        if [ "${1:-}" != down ]; then
            install_debian_packages cloud
            install_cloud_python_packages
        fi
        export NUMA_OVERHEAD_CLOUD_VENV="$cloud_venv"
        exec bash tools/cloud/cloud.sh "$@"
        ;;
    *)
        echo "usage: $0 demo|test|cloud [up|scenario|down] [--short]" >&2
        exit 2
        ;;
esac
