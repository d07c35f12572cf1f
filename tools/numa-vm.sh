#!/bin/bash
# Run commands inside a 4-node NUMA Linux VM (QEMU without KVM, virtme-ng).
#
#   tools/numa-vm.sh CMD [ARGS...]   boot a VM, run CMD in it, print its
#                                    output, exit with its exit code
#
# The VM: 2 vCPUs, 4 NUMA nodes (node 0: 1 GiB + CPU 0, node 1: 1 GiB +
# CPU 1, nodes 2 and 3: 512 MiB each, no CPU), asymmetric SLIT distances
# (NUMA_VM_DISTANCES below), the kernel's automatic NUMA balancing off at
# boot (``echo 1 > /proc/sys/kernel/numa_balancing`` turns it on), cgroup
# v2 with the cpuset, cpu, memory, pids and io controllers enabled. The
# host's root file system is shared read-only (/etc, /var, /tmp are
# writable overlays, /run a tmpfs), so the repository and its venv are at
# the same paths; the venv's bin/ comes first on PATH. CMD runs as root in
# the caller's working directory with the caller's environment (minus a
# few host-only variables), NUMA_VM=1 and EVENTLET_NO_GREENDNS=yes.
#
# A command spool lets many commands share one boot (~25 s under TCG):
#
#   spool=$(tools/numa-vm.sh --boot)   boot a VM serving a new spool dir
#   NUMA_VM_SPOOL=$spool tools/numa-vm.sh CMD...   run CMD in that VM
#   tools/numa-vm.sh --halt "$spool"   power it off, remove the spool
#
# Commands of one spool run one after another. Inside the VM,
# ``tools/numa-vm.sh --libvirtd`` starts virtlogd and libvirtd (qemu:///system,
# QEMU as root, no security driver), once.
#
# Environment: NUMA_VM_KERNEL (kernel image, default the newest
# /boot/vmlinuz-*), NUMA_VM_QEMU (QEMU binary, default qemu-system-x86_64
# on PATH), NUMA_VM_APPEND (more kernel arguments), NUMA_VM_RWDIRS
# (space-separated host directories the VM may write; the spool always),
# NUMA_VM_BOOT_TIMEOUT (seconds, default 300), NUMA_VM_IDLE_TIMEOUT (a
# spool VM powers off after this many seconds without a command, default
# 1800). Exit codes of its own: 125 when the VM cannot run the command
# (missing QEMU, kernel or virtme-ng, boot failure, VM gone).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
self="$top/tools/numa-vm.sh"
venv=${NUMA_OVERHEAD_VENV:-$top/.venv}

# The VM's nodes: memory and CPUs, and the distance matrix (row = from).
NUMA_VM_NODES=('1G,cpus=0' '1G,cpus=1' '512M' '512M')
NUMA_VM_MEMORY=3G
NUMA_VM_CPUS=2
NUMA_VM_DISTANCES='10 16 20 28;18 10 28 22;22 30 10 32;30 24 34 10'
export NUMA_VM_DISTANCES
export NUMA_VM_NODE_MB='1024 1024 512 512'
export NUMA_VM_NODE_CPUS='0;1;;'

# Variables of the host that make no sense inside the VM.
HOST_ONLY_VARS='^(BASH_FUNC_.*|DISPLAY|SSH_.*|XDG_.*|DBUS_.*|TMUX.*|OLDPWD|SHLVL|_|PWD|NUMA_VM_SPOOL)$'

fail() {
    echo "numa-vm: $*" >&2
    exit 125
}

# -- host side ----------------------------------------------------------------

kernel_image() {
    local kernel=${NUMA_VM_KERNEL:-}
    if [ -z "$kernel" ]; then
        # shellcheck disable=SC2012
        kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
    fi
    if [ -z "$kernel" ] || [ ! -r "$kernel" ]; then
        fail "no readable kernel image ${kernel:-/boot/vmlinuz-*}" \
            "(install linux-image-amd64, see bindep.txt)"
    fi
    local version=${kernel##*/vmlinuz-}
    if [ ! -d "/lib/modules/$version" ]; then
        fail "no modules for kernel $version in /lib/modules" \
            "(install linux-image-amd64, see bindep.txt)"
    fi
    echo "$kernel"
}

check_tools() {
    qemu=$(command -v "${NUMA_VM_QEMU:-qemu-system-x86_64}") ||
        fail "QEMU (${NUMA_VM_QEMU:-qemu-system-x86_64}) not found" \
            "(install qemu-system-x86, see bindep.txt)"
    [ -x "$venv/bin/vng" ] || command -v vng >/dev/null ||
        fail "vng not found in $venv/bin or on PATH" \
            "(pip install virtme-ng, see test-requirements.txt)"
    command -v busybox >/dev/null ||
        fail "busybox not found (install busybox-static, see bindep.txt)"
}

distance_args() {
    local rows i=0 j row
    IFS=';' read -r -a rows <<<"$NUMA_VM_DISTANCES"
    for row in "${rows[@]}"; do
        j=0
        for d in $row; do
            [ "$i" != "$j" ] && printf -- '--numa-distance %d,%d=%d\n' \
                "$i" "$j" "$d"
            j=$((j + 1))
        done
        i=$((i + 1))
    done
}

# Boot a VM serving $1 in the background; return when it is ready.
boot() {
    local spool=$1 kernel args=() node dir pid qemu
    check_tools
    kernel=$(kernel_image)
    # vng runs the qemu-system-x86_64 it finds on PATH.
    mkdir -p "$spool/jobs" "$spool/bin"
    ln -sf "$qemu" "$spool/bin/qemu-system-x86_64"
    for node in "${NUMA_VM_NODES[@]}"; do
        args+=(--numa "$node")
    done
    # shellcheck disable=SC2207
    args+=($(distance_args))
    for dir in $spool ${NUMA_VM_RWDIRS:-}; do
        args+=(--rwdir "$dir")
    done
    args+=("--qemu-opts=$(cached_exports "$spool")")
    (
        cd /
        # Its own session: the VM's processes are one process group.
        # QEMU truncates a regular file given as stdout: pipe the console.
        PATH="$spool/bin:$venv/bin:$PATH" exec setsid vng --disable-kvm --run "$kernel" \
            --cpus "$NUMA_VM_CPUS" --memory "$NUMA_VM_MEMORY" "${args[@]}" \
            --append "numa_balancing=disable ${NUMA_VM_APPEND:-}" \
            --exec "$self --guest $spool" </dev/null \
            > >(exec cat >"$spool/console.log") 2>&1
    ) &
    pid=$!
    echo "$pid" >"$spool/vm.pid"
    local deadline
    deadline=$((SECONDS + ${NUMA_VM_BOOT_TIMEOUT:-300}))
    until [ -e "$spool/ready" ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 20 "$spool/console.log" >&2 || true
            fail "the VM stopped while booting (console: $spool/console.log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            halt "$spool" keep
            fail "the VM did not boot in ${NUMA_VM_BOOT_TIMEOUT:-300} s" \
                "(console: $spool/console.log)"
        fi
        sleep 0.5
    done
}

# The directories programs read at every start (the repository, the venv,
# the venv's base Python, /usr), exported once more to be mounted read-only
# with page and metadata caching: virtme shares the root without caching,
# and under TCG importing the project's modules through it takes minutes.
cached_dirs() {
    local dirs=("$top" /usr) python prefix dir kept
    python=$(readlink -f "$venv/bin/python3" 2>/dev/null || true)
    prefix=${python%/bin/*}
    for dir in "$venv" "$prefix"; do
        [ -d "$dir" ] && dirs+=("$dir")
    done
    for dir in "${dirs[@]}"; do
        # Not one inside another, nor one holding a writable directory.
        kept=1
        for other in "${dirs[@]}"; do
            [ "$other" != "$dir" ] && [[ $dir/ == "$other"/* ]] && kept=0
        done
        for other in "$1" ${NUMA_VM_RWDIRS:-}; do
            [[ $other/ == "$dir"/* ]] && kept=0
        done
        [ "$kept" = 1 ] && [ "$dir" != / ] && echo "$dir"
    done | sort -u
}

cached_exports() {
    local i=0 dir
    cached_dirs "$1" | while read -r dir; do
        printf -- '-virtfs local,path=%s,mount_tag=numavm%d,' "$dir" "$i"
        printf -- 'security_model=none,readonly=on '
        i=$((i + 1))
    done
    cached_dirs "$1" >"$1/cached"
}

vm_alive() {
    local pid
    pid=$(cat "$1/vm.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null
}

# Print what file $1 gained since the byte offset kept in variable $2.
drain() {
    local file=$1 size offset=${!2}
    size=$(stat -c %s "$file" 2>/dev/null || echo 0)
    if [ "$size" -gt "$offset" ]; then
        # Exactly the bytes counted: the file may grow meanwhile.
        dd if="$file" iflag=skip_bytes,count_bytes skip="$offset" \
            count="$((size - offset))" bs=64K status=none
        printf -v "$2" %s "$size"
    fi
}

# Run "$@" in the VM serving $1; exit with its exit code.
run_in() {
    # shellcheck disable=SC2034  # out and err: offsets kept by drain
    local spool=$1 job name out=0 err=0
    shift
    vm_alive "$spool" || fail "no VM is serving $spool"
    name="$(date +%s%N)-$$"
    job="$spool/jobs/$name"
    {
        echo 'set -e'
        env -0 | while IFS= read -r -d '' var; do
            [[ ${var%%=*} =~ $HOST_ONLY_VARS ]] && continue
            [[ ${var%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
            printf 'export %s=%q\n' "${var%%=*}" "${var#*=}"
        done
        printf 'export PATH=%q\n' "$venv/bin:$PATH"
        echo 'export NUMA_VM=1 PYTHONDONTWRITEBYTECODE=1'
        # eventlet (under oslo.privsep) imports dnspython unless told not
        # to: a minute under TCG.
        printf 'export EVENTLET_NO_GREENDNS=%q\n' \
            "${EVENTLET_NO_GREENDNS:-yes}"
        printf 'cd %q\n' "$PWD"
        printf 'exec'
        printf ' %q' "$@"
        echo
    } >"$job.tmp"
    mv "$job.tmp" "$job.sh"
    while [ ! -e "$job.rc" ]; do
        if ! vm_alive "$spool"; then
            sleep 1
            [ -e "$job.rc" ] && break
            fail "the VM stopped before the command finished" \
                "(console: $spool/console.log)"
        fi
        drain "$job.out" out
        drain "$job.err" err >&2
        sleep 0.2
    done
    drain "$job.out" out
    drain "$job.err" err >&2
    rm -f "$job.sh" "$job.out" "$job.err"
    local rc
    rc=$(cat "$job.rc")
    rm -f "$job.rc"
    return "$rc"
}

# Power off the VM serving $1; remove the spool unless $2 is "keep".
halt() {
    local spool=$1 pid
    pid=$(cat "$spool/vm.pid" 2>/dev/null || true)
    touch "$spool/halt" 2>/dev/null || true
    if [ -n "$pid" ]; then
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        # The process group of the VM this script started.
        kill -TERM -- "-$pid" 2>/dev/null || true
    fi
    if [ "${2:-}" != keep ]; then
        rm -rf "$spool"
    fi
}

# -- guest side ---------------------------------------------------------------

guest() {
    local spool=$1 job idle=0 controller
    echo 1 >/run/numa-vm
    local i=0 dir
    while read -r dir; do
        mount -t 9p -o trans=virtio,version=9p2000.L,cache=loose,ro \
            "numavm$i" "$dir" ||
            echo "numa-vm: $dir not cached (slow imports)" >&2
        i=$((i + 1))
    done <"$spool/cached"
    for controller in cpuset cpu memory pids io; do
        echo "+$controller" >/sys/fs/cgroup/cgroup.subtree_control ||
            echo "numa-vm: cgroup controller $controller not enabled" >&2
    done
    touch "$spool/ready"
    while [ ! -e "$spool/halt" ]; do
        job=$(find "$spool/jobs" -maxdepth 1 -name '*.sh' | sort | head -n 1)
        if [ -z "$job" ]; then
            sleep 0.3
            idle=$((idle + 1))
            if [ "$idle" -gt $((${NUMA_VM_IDLE_TIMEOUT:-1800} * 10 / 3)) ]; then
                echo "numa-vm: idle for ${NUMA_VM_IDLE_TIMEOUT:-1800} s" >&2
                break
            fi
            continue
        fi
        idle=0
        mv "$job" "${job%.sh}.run"
        local rc=0
        bash "${job%.sh}.run" >"${job%.sh}.out" 2>"${job%.sh}.err" \
            </dev/null || rc=$?
        rm -f "${job%.sh}.run"
        echo "$rc" >"${job%.sh}.rc.tmp"
        mv "${job%.sh}.rc.tmp" "${job%.sh}.rc"
    done
}

# Start virtlogd and libvirtd in the VM (idempotent).
libvirtd_up() {
    [ -e /run/numa-vm ] || fail "--libvirtd runs inside the VM only"
    if [ -S /run/libvirt/libvirt-sock ] && pgrep -x libvirtd >/dev/null; then
        return
    fi
    command -v libvirtd >/dev/null ||
        fail "libvirtd not found (install libvirt-daemon, see bindep.txt)"
    mkdir -p /etc/libvirt /var/lib/libvirt /var/cache/libvirt \
        /run/libvirt /var/log/libvirt
    # QEMU runs as root without a security driver: the VM is the sandbox.
    cat >/etc/libvirt/qemu.conf <<'EOF'
security_driver = "none"
user = "root"
group = "root"
EOF
    # No default network (no dnsmasq, no iptables in the VM).
    rm -f /etc/libvirt/qemu/networks/autostart/*.xml
    # The daemons (and the QEMU processes libvirt daemonizes) start under a
    # child subreaper that reaps them as soon as they exit: the VM's init
    # does not, and libvirt took a zombie QEMU for a live one, waiting
    # ~40 s per guest destroyed or capabilities probe.
    if ! pgrep -x libvirtd >/dev/null; then
        setsid python3 "$top/tools/subreaper.py" virtlogd libvirtd \
            </dev/null >/dev/null 2>&1 &
    fi
    for _ in $(seq 1 300); do
        # The socket comes first; a driver that fails to start ends the
        # daemon (and removes it) a moment later.
        if [ -S /run/libvirt/libvirt-sock ]; then
            sleep 1
            pgrep -x libvirtd >/dev/null && return
            break
        fi
        sleep 0.1
    done
    tail -n 20 /var/log/libvirt/libvirtd.log >&2 2>/dev/null || true
    fail "libvirtd did not start (its log above)"
}

case "${1:-}" in
    --boot)
        spool=${2:-$(mktemp -d /tmp/numa-vm.XXXXXX)}
        boot "$spool"
        echo "$spool"
        ;;
    --halt)
        [ -n "${2:-}" ] || fail "usage: $0 --halt SPOOL"
        halt "$2"
        ;;
    --guest)
        guest "$2"
        ;;
    --libvirtd)
        libvirtd_up
        ;;
    '' | -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        [ -n "${1:-}" ]
        ;;
    *)
        if [ -n "${NUMA_VM_SPOOL:-}" ]; then
            run_in "$NUMA_VM_SPOOL" "$@"
        else
            spool=$(mktemp -d /tmp/numa-vm.XXXXXX)
            trap 'halt "$spool"' EXIT
            trap 'exit 130' INT TERM
            boot "$spool"
            run_in "$spool" "$@"
        fi
        ;;
esac
