#!/bin/bash
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
#
# A one-machine OpenStack cloud with nova-numa-overhead on, from PyPI and
# Debian packages, configured the way devstack configures each service and
# with the devstack plugin's own functions for the plugin's part of
# nova.conf. Called by tools/run.sh, which installs the packages first:
#
#   tools/run.sh cloud [--short]     bring it up, then run the scenario
#   tools/run.sh cloud up            bring it up only
#   tools/run.sh cloud scenario [--short]
#   tools/run.sh cloud down          stop what it started, drop what it
#                                    created
#
# Everything lives under one run directory ($NUMA_OVERHEAD_CLOUD_DIR,
# default .cloud): etc/ (every config file), log/ (one log per service),
# run/ (pid files), data/ (databases' files stay in MariaDB; images,
# instances, state here) and "created" (what down must undo). The layout
# and how to read each log: doc/source/admin/cloud.rst.

set -o errexit -o nounset -o pipefail

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLOUD_DIR=${NUMA_OVERHEAD_CLOUD_DIR:-$TOP/.cloud}
VENV=${NUMA_OVERHEAD_CLOUD_VENV:-$TOP/.venv-cloud}
# Prefix of every database, user, vhost and libvirt domain of this cloud:
# MariaDB and RabbitMQ are shared with others.
NAME=${NUMA_OVERHEAD_CLOUD_NAME:-nnocloud}
# keystone, glance, placement, neutron, nova-api listen on PORT..PORT+4.
PORT=${NUMA_OVERHEAD_CLOUD_PORT:-28000}
# Seconds to wait for a service to answer.
SERVICE_TIMEOUT=${NUMA_OVERHEAD_CLOUD_TIMEOUT:-180}

ETC=$CLOUD_DIR/etc
LOGS=$CLOUD_DIR/log
PIDS=$CLOUD_DIR/run
DATA=$CLOUD_DIR/data
# Instance disks: under DATA when QEMU's user can reach it, else in a
# directory of this cloud under /var/lib (see up).
INSTANCES=$DATA/nova/instances
CREATED=$CLOUD_DIR/created
BIN=$VENV/bin
HOST_IP=127.0.0.1
DB_HOST=127.0.0.1
RABBIT_HOST=127.0.0.1
RABBIT_PORT=5672
REGION_NAME=RegionOne
SERVICE_PROJECT_NAME=service
SERVICE_DOMAIN_NAME=Default
KEYSTONE_URL=http://$HOST_IP:$PORT
GLANCE_URL=http://$HOST_IP:$((PORT + 1))
PLACEMENT_URL=http://$HOST_IP:$((PORT + 2))
NEUTRON_URL=http://$HOST_IP:$((PORT + 3))
NOVA_URL=http://$HOST_IP:$((PORT + 4))
COMPUTE_HOST=$(hostname)
NOVA_CONF=$ETC/nova/nova.conf
NOVA_CPU_CONF=$ETC/nova/nova-cpu.conf
# The scheduler's filters before the devstack plugin adds its own: the
# list of README.rst's "Enabling it in Nova" without NUMAOverheadFilter.
NOVA_FILTERS=ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter
NOVA_FILTERS+=,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter
NOVA_FILTERS+=,NUMATopologyFilter

export PYTHON=$BIN/python
# Devstack's ini functions and trueorfalse; the ini functions edit with
# this interpreter.
# shellcheck source=tools/cloud/devstack-functions.sh
source "$TOP/tools/cloud/devstack-functions.sh"

function log {
    printf '==> %s\n' "$*" >&2
}

function die {
    # devstack's die: die [line] message
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
        shift
    fi
    printf 'cloud: %s\n' "$*" >&2
    exit 1
}

function elapsed {
    echo $((SECONDS - ${1:-0}))
}

# -- devstack's functions, real ones, for the plugin's lib ------------------

# Services of this cloud, as devstack names them.
ENABLED_SERVICES=key,g-api,placement-api,neutron-api,n-api,n-cond,n-sch
ENABLED_SERVICES+=,n-cpu,numa-overhead-agent

function is_service_enabled {
    local service
    for service in "$@"; do
        if [[ ",$ENABLED_SERVICES," == *",$service,"* ]]; then
            return 0
        fi
    done
    return 1
}

function define_plugin {
    :
}

function enable_service {
    local service
    for service in "$@"; do
        is_service_enabled "$service" || ENABLED_SERVICES+=",$service"
    done
}

function is_ubuntu {
    # Debian counts as Ubuntu for devstack.
    [[ -f /etc/debian_version ]]
}

function is_fedora {
    [[ -f /etc/redhat-release ]]
}

function get_python_exec_prefix {
    echo "$BIN"
}

function warn {
    shift
    log "WARNING: $*"
}

function echo_summary {
    log "$*"
}

# run_process name "command": in a session of its own (stop_process ends
# the whole group), output to log/<name>.log, pid in run/<name>.pid; every
# session is kept in run/sessions until down has checked that none of its
# processes is left.
function run_process {
    local name=$1 command=$2
    log "starting $name: $command"
    # shellcheck disable=SC2086
    setsid $command >> "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$PIDS/$name.pid"
    echo $! >> "$PIDS/sessions"
}

function stop_process {
    stop_processes "$1"
}

# stop_processes name... - TERM to each group at once, KILL what is left
# after 15 s.
function stop_processes {
    local name pid pids=()
    for name in "$@"; do
        [[ -f "$PIDS/$name.pid" ]] || continue
        pid=$(cat "$PIDS/$name.pid")
        rm -f "$PIDS/$name.pid"
        log "stopping $name"
        kill -TERM -- "-$pid" 2> /dev/null && pids+=("$pid")
    done
    for _ in $(seq 1 30); do
        for pid in "${pids[@]}"; do
            if kill -0 -- "-$pid" 2> /dev/null; then
                sleep 0.5
                continue 2
            fi
        done
        return 0
    done
    for pid in "${pids[@]}"; do
        if kill -KILL -- "-$pid" 2> /dev/null; then
            log "process group $pid did not stop in 15 s: killed"
        fi
    done
}

# -- helpers -----------------------------------------------------------------

function record {
    echo "$*" >> "$CREATED"
}

function listening {
    (exec 3<> "/dev/tcp/$1/$2") 2> /dev/null
}

function wait_for_url {
    local name=$1 url=$2 start=$SECONDS
    while ! curl -s -o /dev/null "$url"; do
        if (( SECONDS - start > SERVICE_TIMEOUT )); then
            die "$name did not answer at $url in ${SERVICE_TIMEOUT}s (see $LOGS/$name.log)"
        fi
        if [[ -f "$PIDS/$name.pid" ]] && ! kill -0 "$(cat "$PIDS/$name.pid")" 2> /dev/null; then
            tail -n 20 "$LOGS/$name.log" >&2 || true
            die "$name exited (see $LOGS/$name.log)"
        fi
        sleep 1
    done
    log "$name answers at $url ($(elapsed "$start") s)"
}

function mysql_root {
    mysql -uroot -h"$DB_HOST" --batch --skip-column-names "$@"
}

function database_url {
    echo "mysql+pymysql://$NAME:$DB_PASSWORD@$DB_HOST/${NAME}_$1?charset=utf8"
}

function secret {
    local file=$CLOUD_DIR/secrets value
    if [[ -f "$file" ]] && value=$(grep "^$1=" "$file"); then
        echo "${value#*=}"
        return
    fi
    value=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
    (umask 077 && echo "$1=$value" >> "$file")
    echo "$value"
}

# -- shared services -----------------------------------------------------------

function ensure_mariadb {
    if listening "$DB_HOST" 3306; then
        return
    fi
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    for _ in $(seq 1 60); do
        listening "$DB_HOST" 3306 && return
        sleep 1
    done
    die "MariaDB did not start on $DB_HOST:3306"
}

function ensure_rabbitmq {
    if listening "$RABBIT_HOST" "$RABBIT_PORT"; then
        return
    fi
    log "starting RabbitMQ"
    rabbitmq-server -detached || true
    for _ in $(seq 1 60); do
        listening "$RABBIT_HOST" "$RABBIT_PORT" && return
        sleep 1
    done
    die "RabbitMQ did not start on $RABBIT_HOST:$RABBIT_PORT"
}

# Without udev (a container, a minimal VM) /dev/kvm stays root-only: libvirt
# 9 then finds at every look-up of QEMU's capabilities that "KVM was
# enabled when probing, but it is not available now" (to its QEMU user)
# and probes QEMU again, which made every defineXML take a minute here.
# Debian's udev rule makes it root:kvm 0660; so does this (down restores
# it). Guests still run under TCG: virt_type = qemu.
function ensure_kvm_permissions {
    [[ -c /dev/kvm ]] || return 0
    local owner mode
    owner=$(stat -c %G /dev/kvm)
    mode=$(stat -c %a /dev/kvm)
    if [[ "$owner" != kvm ]] || (( (8#$mode & 8#060) != 8#060 )); then
        log "/dev/kvm is group $owner mode $mode: root:kvm 0660, as Debian's udev rule sets it"
        chgrp kvm /dev/kvm
        chmod 0660 /dev/kvm
        record kvm "$owner" "$mode"
    fi
}

# libvirtd and virtlogd: used as they are when they run (a systemd host),
# started here (and stopped by down) when they do not.
function ensure_libvirt {
    if virsh -c qemu:///system version > /dev/null 2>&1; then
        return
    fi
    local daemon pid
    for daemon in virtlogd libvirtd; do
        if ! pgrep -x "$daemon" > /dev/null; then
            log "starting $daemon"
            rm -f "/run/$daemon.pid"
            "$daemon" --daemon
            for _ in $(seq 1 50); do
                [[ -s "/run/$daemon.pid" ]] && break
                sleep 0.2
            done
            pid=$(cat "/run/$daemon.pid" 2> /dev/null) \
                || die "$daemon wrote no /run/$daemon.pid"
            record daemon "$daemon $pid"
        fi
    done
    for _ in $(seq 1 30); do
        virsh -c qemu:///system version > /dev/null 2>&1 && return
        sleep 1
    done
    die "libvirtd does not answer on qemu:///system"
}

function create_databases {
    local db
    mysql_root -e "CREATE USER IF NOT EXISTS '$NAME'@'%' IDENTIFIED BY '$DB_PASSWORD'; ALTER USER '$NAME'@'%' IDENTIFIED BY '$DB_PASSWORD'"
    record dbuser "$NAME"
    for db in keystone glance placement neutron nova_api nova_cell0 nova_cell1; do
        mysql_root -e "DROP DATABASE IF EXISTS ${NAME}_$db; CREATE DATABASE ${NAME}_$db CHARACTER SET utf8; GRANT ALL PRIVILEGES ON ${NAME}_$db.* TO '$NAME'@'%'"
        record database "${NAME}_$db"
    done
}

function create_vhost {
    rabbitmqctl -q add_vhost "$NAME" > /dev/null 2>&1 || true
    record vhost "$NAME"
    rabbitmqctl -q delete_user "$NAME" > /dev/null 2>&1 || true
    rabbitmqctl -q add_user "$NAME" "$RABBIT_PASSWORD" > /dev/null
    record rabbituser "$NAME"
    rabbitmqctl -q set_permissions -p "$NAME" "$NAME" '.*' '.*' '.*' > /dev/null
}

# -- configuration (devstack's lib/<service>, written out) --------------------

# [keystone_authtoken] and keystoneauth sections, as devstack's
# configure_keystone_authtoken_middleware and configure_keystoneauth.
function keystoneauth_section {
    local section=$1 user=$2
    cat << EOF
[$section]
auth_type = password
interface = public
auth_url = $KEYSTONE_URL
username = $user
password = $SERVICE_PASSWORD
user_domain_name = $SERVICE_DOMAIN_NAME
project_name = $SERVICE_PROJECT_NAME
project_domain_name = $SERVICE_DOMAIN_NAME
region_name = $REGION_NAME
EOF
    if [[ "$section" == keystone_authtoken ]]; then
        echo "www_authenticate_uri = $KEYSTONE_URL"
    fi
    echo
}

# uwsgi in front of a WSGI module, listening on HTTP itself (devstack's
# write_local_uwsgi_http_config).
function write_uwsgi_config {
    local file=$1 module=$2 port=$3 name=$4
    shift 4
    {
        echo "# $name, as devstack runs it"
        echo "[uwsgi]"
        echo "module = $module"
        echo "http-socket = $HOST_IP:$port"
        echo "virtualenv = $VENV"
        echo "master = true"
        echo "processes = 1"
        echo "threads = 4"
        echo "enable-threads = true"
        echo "die-on-term = true"
        echo "exit-on-reload = false"
        echo "worker-reload-mercy = 5"
        echo "thunder-lock = true"
        echo "hook-master-start = unix_signal:15 gracefully_kill_them_all"
        echo "buffer-size = 65535"
        echo "add-header = Connection: close"
        echo "lazy-apps = true"
        local env
        for env in "$@"; do
            echo "env = $env"
        done
    } > "$file"
}

function configure_keystone {
    mkdir -p "$ETC/keystone/fernet-keys" "$ETC/keystone/credential-keys"
    cat > "$ETC/keystone/keystone.conf" << EOF
[DEFAULT]
debug = True
public_endpoint = $KEYSTONE_URL
max_token_size = 16384

[database]
connection = $(database_url keystone)

[token]
provider = fernet

[fernet_tokens]
key_repository = $ETC/keystone/fernet-keys/

[credential]
key_repository = $ETC/keystone/credential-keys/

[identity]
# devstack's KEYSTONE_PASSWORD_HASH_ROUNDS: fast tokens on a test cloud.
password_hash_rounds = 4

[oslo_policy]
enforce_new_defaults = False
EOF
    write_uwsgi_config "$ETC/keystone/keystone-uwsgi.ini" \
        keystone.wsgi.api:application "$PORT" keystone \
        "OS_KEYSTONE_CONFIG_FILES=$ETC/keystone/keystone.conf"
}

function configure_glance {
    mkdir -p "$ETC/glance" "$DATA/glance/images" "$DATA/glance/staging" \
        "$DATA/glance/tasks" "$DATA/glance/cache" "$DATA/glance/locks"
    cp "$VENV/etc/glance/glance-api-paste.ini" "$ETC/glance/"
    {
        cat << EOF
[DEFAULT]
debug = True
enabled_backends = local:file
image_cache_dir = $DATA/glance/cache/
public_endpoint = $GLANCE_URL
worker_self_reference_url = $GLANCE_URL
transport_url = $TRANSPORT_URL

[glance_store]
default_backend = local

[local]
filesystem_store_datadir = $DATA/glance/images/

[os_glance_staging_store]
filesystem_store_datadir = $DATA/glance/staging/

[os_glance_tasks_store]
filesystem_store_datadir = $DATA/glance/tasks/

[database]
connection = $(database_url glance)

[paste_deploy]
flavor = keystone

[oslo_concurrency]
lock_path = $DATA/glance/locks

[oslo_messaging_notifications]
driver = messagingv2

[wsgi]
python_interpreter = $BIN/python

[oslo_policy]
enforce_new_defaults = False

EOF
        keystoneauth_section keystone_authtoken glance
    } > "$ETC/glance/glance-api.conf"
    write_uwsgi_config "$ETC/glance/glance-uwsgi.ini" \
        glance.wsgi.api:application $((PORT + 1)) glance-api \
        "OS_GLANCE_CONFIG_DIR=$ETC/glance"
}

function configure_placement {
    mkdir -p "$ETC/placement"
    {
        cat << EOF
[DEFAULT]
debug = True

[placement_database]
connection = $(database_url placement)

[api]
auth_strategy = keystone

[oslo_policy]
enforce_new_defaults = False

EOF
        keystoneauth_section keystone_authtoken placement
    } > "$ETC/placement/placement.conf"
    write_uwsgi_config "$ETC/placement/placement-uwsgi.ini" \
        placement.wsgi.api:application $((PORT + 2)) placement-api \
        "OS_PLACEMENT_CONFIG_DIR=$ETC/placement"
}

# Neutron's API only: ML2 with no mechanism driver and no agent. Servers
# boot with --nic none; nova-compute still asks neutron for their ports on
# reboot, delete and its periodic cache refresh.
function configure_neutron {
    mkdir -p "$ETC/neutron" "$DATA/neutron/locks"
    cp "$VENV/etc/neutron/api-paste.ini" "$ETC/neutron/"
    {
        cat << EOF
[DEFAULT]
debug = True
core_plugin = ml2
service_plugins = router
auth_strategy = keystone
api_paste_config = $ETC/neutron/api-paste.ini
state_path = $DATA/neutron
transport_url = $TRANSPORT_URL
notify_nova_on_port_status_changes = False
notify_nova_on_port_data_changes = False

[database]
connection = $(database_url neutron)

[oslo_concurrency]
lock_path = $DATA/neutron/locks

[oslo_policy]
enforce_new_defaults = False

EOF
        keystoneauth_section keystone_authtoken neutron
    } > "$ETC/neutron/neutron.conf"
    cat > "$ETC/neutron/ml2_conf.ini" << EOF
[ml2]
type_drivers = flat
tenant_network_types =
mechanism_drivers =
extension_drivers =
EOF
    write_uwsgi_config "$ETC/neutron/neutron-uwsgi.ini" \
        neutron.wsgi.api:application $((PORT + 3)) neutron-api \
        "OS_NEUTRON_CONFIG_DIR=$ETC/neutron" \
        "OS_NEUTRON_CONFIG_FILES=neutron.conf;ml2_conf.ini"
}

# nova.conf as devstack's create_nova_conf and hypervisor-libvirt write it
# (single conductor, one cell), then the plugin's post-config.
function configure_nova {
    mkdir -p "$ETC/nova" "$INSTANCES" "$DATA/nova/state"
    cp "$VENV/etc/nova/api-paste.ini" "$ETC/nova/"
    {
        cat << EOF
[DEFAULT]
debug = True
host = $COMPUTE_HOST
my_ip = $HOST_IP
state_path = $DATA/nova/state
instances_path = $INSTANCES
instance_name_template = $NAME-%08x
transport_url = $TRANSPORT_URL
compute_driver = libvirt.LibvirtDriver
pointer_model = ps2mouse
enabled_apis = osapi_compute
report_interval = 10
service_down_time = 60
graceful_shutdown_timeout = 5
osapi_compute_workers = 1

[wsgi]
api_paste_config = $ETC/nova/api-paste.ini

[api]
response_validation = error

[api_database]
connection = $(database_url nova_api)

[database]
connection = $(database_url nova_cell1)

[scheduler]
workers = 1

[filter_scheduler]
enabled_filters = $NOVA_FILTERS

[conductor]
workers = 1

[oslo_concurrency]
lock_path = $DATA/nova/state

[oslo_messaging_notifications]
driver = messagingv2
transport_url = $TRANSPORT_URL

[notifications]
notification_format = unversioned

[oslo_policy]
enforce_new_defaults = False

[upgrade_levels]
compute = auto

[key_manager]
backend = nova.keymgr.conf_key_mgr.ConfKeyManager

[vnc]
enabled = False

[libvirt]
virt_type = qemu
connection_uri = qemu:///system
cpu_mode = custom
cpu_models = Nehalem

[workarounds]
libvirt_disable_apic = True

[nova_sys_admin]
# Nova's privsep helper, as root, without a rootwrap sudoers entry.
helper_command = sudo $BIN/privsep-helper --config-file $NOVA_CPU_CONF

[service_user]
send_service_user_token = True
EOF
        keystoneauth_section service_user nova | tail -n +2
        keystoneauth_section keystone_authtoken nova
        keystoneauth_section placement nova
        keystoneauth_section neutron nova
    } > "$NOVA_CONF"
    write_uwsgi_config "$ETC/nova/nova-api-uwsgi.ini" \
        nova.wsgi.osapi_compute:application $((PORT + 4)) nova-api \
        "OS_NOVA_CONFIG_DIR=$ETC/nova" \
        "OS_NOVA_CONFIG_FILES=api-paste.ini;nova.conf"
}

# The devstack plugin's settings, with the devstack variables it reads and
# this cloud's local.conf: the agent moves pages; a host without a fresh
# report fails a request that sets a limit, so that a stale report shows.
function plugin_settings {
    DEST=$CLOUD_DIR
    DATA_DIR=$DATA
    NUMA_OVERHEAD_DIR=$TOP
    NOVA_BIN_DIR=$BIN
    LIBVIRT_TYPE=qemu
    NUMA_OVERHEAD_ENFORCEMENT=pages
    NUMA_OVERHEAD_UNKNOWN_HOST=fail
    # shellcheck source=devstack/settings
    source "$TOP/devstack/settings"
}

# The plugin's phases, its own functions for real, as stack.sh and
# unstack.sh call them.
function plugin_phase {
    # shellcheck source=devstack/plugin.sh
    source "$TOP/devstack/plugin.sh" "$@"
}

# The plugin's post-config on nova.conf, before Nova starts.
function configure_nova_numa_overhead_plugin {
    plugin_phase stack post-config
    # Seconds, not minutes, so that the scenario sees a report go stale.
    iniset "$NOVA_CONF" numa_overhead report_ttl 20
    iniset "$NOVA_CONF" numa_overhead_agent report_interval 5
    iniset "$NOVA_CONF" numa_overhead_agent heartbeat_interval 5
}

# nova-cpu.conf: nova.conf without the database (devstack's
# start_nova_compute).
function configure_nova_compute {
    cp "$NOVA_CONF" "$NOVA_CPU_CONF"
    inidelete "$NOVA_CPU_CONF" database connection
    inidelete "$NOVA_CPU_CONF" api_database connection
}

# write_openrc file user project password - credentials to source
function write_openrc {
    cat > "$1" << EOF
# source this file to use the cloud as $2: openstack server list
export OS_AUTH_URL=$KEYSTONE_URL/v3
export OS_IDENTITY_API_VERSION=3
export OS_USERNAME=$2
export OS_PASSWORD=$4
export OS_PROJECT_NAME=$3
export OS_USER_DOMAIN_NAME=Default
export OS_PROJECT_DOMAIN_NAME=Default
export OS_REGION_NAME=$REGION_NAME
export PATH=$BIN:\$PATH
EOF
}

# -- databases ---------------------------------------------------------------

function init_keystone {
    local manage="$BIN/keystone-manage --config-file $ETC/keystone/keystone.conf"
    $manage db_sync
    $manage fernet_setup --keystone-user root --keystone-group root
    $manage credential_setup --keystone-user root --keystone-group root
    $manage bootstrap --bootstrap-username admin \
        --bootstrap-password "$ADMIN_PASSWORD" \
        --bootstrap-project-name admin --bootstrap-role-name admin \
        --bootstrap-service-name keystone --bootstrap-region-id "$REGION_NAME" \
        --bootstrap-public-url "$KEYSTONE_URL"
}

# The API database and each cell's at once, as devstack's init_nova.
function init_nova_api {
    "$BIN/nova-manage" --config-file "$NOVA_CONF" api_db sync
}

function init_nova_cell0 {
    printf '[database]\nconnection = %s\n' "$(database_url nova_cell0)" \
        > "$ETC/nova/nova-cell0.conf"
    "$BIN/nova-manage" --config-file "$NOVA_CONF" \
        --config-file "$ETC/nova/nova-cell0.conf" db sync --local_cell
}

function init_nova_cell1 {
    "$BIN/nova-manage" --config-file "$NOVA_CONF" db sync --local_cell
}

# Once the schemas are there: cell0 and cell1 in the API database.
function map_nova_cells {
    local manage="$BIN/nova-manage --config-file $NOVA_CONF"
    # Called with || die: errexit does not apply inside, hence the &&.
    $manage cell_v2 map_cell0 --database_connection "$(database_url nova_cell0)" \
        && $manage cell_v2 create_cell --name cell1
}

# Runs each "name command..." in the background, output to
# log/init-<name>.log; fails with the log of the first that failed.
function run_parallel {
    local -A jobs
    local name failed=""
    while (( $# )); do
        name=$1
        "$2" > "$LOGS/init-$name.log" 2>&1 &
        jobs[$name]=$!
        shift 2
    done
    for name in "${!jobs[@]}"; do
        if ! wait "${jobs[$name]}"; then
            tail -n 20 "$LOGS/init-$name.log" >&2
            failed+=" $name"
        fi
    done
    [[ -z "$failed" ]] || die "initialisation failed:$failed (see $LOGS/init-*.log)"
}

function init_glance {
    "$BIN/glance-manage" --config-dir "$ETC/glance" db_sync
}

function init_placement {
    "$BIN/placement-manage" --config-dir "$ETC/placement" db sync
}

function init_neutron {
    "$BIN/neutron-db-manage" --config-file "$ETC/neutron/neutron.conf" \
        --config-file "$ETC/neutron/ml2_conf.ini" upgrade heads
}

# -- up and down -------------------------------------------------------------

function up {
    local start=$SECONDS step
    if [[ -f "$CREATED" || -d "$PIDS" && -n "$(ls -A "$PIDS" 2> /dev/null)" ]]; then
        log "a previous cloud is in $CLOUD_DIR: taking it down first"
        down
    fi
    for port in $PORT $((PORT + 1)) $((PORT + 2)) $((PORT + 3)) $((PORT + 4)); do
        if listening "$HOST_IP" "$port"; then
            die "port $port is taken: set NUMA_OVERHEAD_CLOUD_PORT to a free range of 5 ports"
        fi
    done
    rm -rf "$CLOUD_DIR"
    mkdir -p "$ETC" "$LOGS" "$PIDS" "$DATA"
    : > "$CREATED"
    # QEMU runs as libvirt-qemu and opens the instance disks: a checkout
    # under a private directory (mktemp -d) is out of its reach.
    if id -u libvirt-qemu > /dev/null 2>&1 &&
            ! runuser -u libvirt-qemu -- test -x "$DATA"; then
        local shared=/var/lib/nova-numa-overhead-cloud/$NAME
        INSTANCES=$shared/instances
        log "QEMU (user libvirt-qemu) cannot reach $DATA: instance disks go to $INSTANCES"
        rm -rf "$shared"
        mkdir -p "$INSTANCES"
        chmod 755 /var/lib/nova-numa-overhead-cloud "$shared" "$INSTANCES"
        echo "dir $shared" >> "$CREATED"
    fi
    DB_PASSWORD=$(secret database)
    RABBIT_PASSWORD=$(secret rabbit)
    SERVICE_PASSWORD=$(secret service)
    ADMIN_PASSWORD=$(secret admin)
    DEMO_PASSWORD=$(secret demo)
    TRANSPORT_URL="rabbit://$NAME:$RABBIT_PASSWORD@$RABBIT_HOST:$RABBIT_PORT/$NAME"

    step=$SECONDS
    log "MariaDB, RabbitMQ, libvirtd"
    ensure_mariadb
    ensure_rabbitmq
    ensure_kvm_permissions
    ensure_libvirt
    create_databases
    create_vhost
    log "shared services ready ($(elapsed "$step") s)"

    step=$SECONDS
    configure_keystone
    configure_glance
    configure_placement
    configure_neutron
    configure_nova
    plugin_settings
    configure_nova_numa_overhead_plugin
    configure_nova_compute
    write_openrc "$CLOUD_DIR/openrc" admin admin "$ADMIN_PASSWORD"
    write_openrc "$CLOUD_DIR/openrc-demo" demo demo "$DEMO_PASSWORD"
    log "configuration written to $ETC ($(elapsed "$step") s)"

    step=$SECONDS
    log "database schemas (keystone, glance, placement, neutron, nova)"
    run_parallel keystone init_keystone glance init_glance \
        placement init_placement neutron init_neutron \
        nova-api init_nova_api nova-cell0 init_nova_cell0 \
        nova-cell1 init_nova_cell1
    map_nova_cells >> "$LOGS/init-nova-api.log" 2>&1 \
        || die "mapping the cells failed (see $LOGS/init-nova-api.log)"
    log "schemas ready ($(elapsed "$step") s)"

    step=$SECONDS
    run_process keystone "$BIN/uwsgi --ini $ETC/keystone/keystone-uwsgi.ini"
    wait_for_url keystone "$KEYSTONE_URL/v3"
    "$BIN/python" "$TOP/tools/cloud/bootstrap.py" accounts \
        --auth-url "$KEYSTONE_URL/v3" --admin-password "$ADMIN_PASSWORD" \
        --service-password "$SERVICE_PASSWORD" \
        --demo-password "$DEMO_PASSWORD" --region "$REGION_NAME" \
        --endpoint "image=glance=$GLANCE_URL" \
        --endpoint "placement=placement=$PLACEMENT_URL" \
        --endpoint "network=neutron=$NEUTRON_URL" \
        --endpoint "compute=nova=$NOVA_URL/v2.1"
    # The services' users exist now: Nova's services ask keystone for
    # placement's endpoint as they start.
    run_process glance-api "$BIN/uwsgi --ini $ETC/glance/glance-uwsgi.ini"
    run_process placement-api "$BIN/uwsgi --ini $ETC/placement/placement-uwsgi.ini"
    run_process neutron-api "$BIN/uwsgi --ini $ETC/neutron/neutron-uwsgi.ini"
    run_process nova-api "$BIN/uwsgi --ini $ETC/nova/nova-api-uwsgi.ini"
    run_process nova-conductor "$BIN/nova-conductor --config-file $NOVA_CONF"
    run_process nova-scheduler "$BIN/nova-scheduler --config-file $NOVA_CONF"
    wait_for_url placement-api "$PLACEMENT_URL"
    # nova-compute registers its resource provider in placement at start.
    run_process nova-compute "$BIN/nova-compute --config-file $NOVA_CPU_CONF"
    # The agent, as the plugin's extra phase starts it.
    plugin_phase stack extra
    wait_for_url glance-api "$GLANCE_URL"
    wait_for_url neutron-api "$NEUTRON_URL"
    wait_for_url nova-api "$NOVA_URL"
    log "API services answer ($(elapsed "$step") s)"

    step=$SECONDS
    # shellcheck source=/dev/null
    source "$CLOUD_DIR/openrc"
    "$BIN/python" "$TOP/tools/cloud/bootstrap.py" compute \
        --host "$COMPUTE_HOST" --timeout "$SERVICE_TIMEOUT" \
        --discover "$BIN/nova-manage --config-file $NOVA_CONF cell_v2 discover_hosts --verbose"
    log "nova-compute up and mapped ($(elapsed "$step") s)"

    # A guest that boots no OS: QEMU runs and holds its memory.
    truncate -s 1M "$DATA/tiny.raw"
    "$BIN/openstack" image create --disk-format raw --container-format bare \
        --public --file "$DATA/tiny.raw" tiny-raw -f value -c id > /dev/null
    log "image tiny-raw (1 MiB raw, no OS) uploaded to glance"
    log "cloud up in $(elapsed "$start") s: source $CLOUD_DIR/openrc to use it; tools/run.sh cloud down stops it"
}

# Processes of this cloud: in the sessions its services were started in
# (their workers too), with a config under its run directory (the privsep
# helpers sudo starts in sessions of their own), or its QEMU guests.
function cloud_processes {
    local sessions=" "
    if [[ -f "$PIDS/sessions" ]]; then
        sessions+="$(tr '\n' ' ' < "$PIDS/sessions")"
    fi
    ps -eo sid=,pid=,args= | awk -v sessions="$sessions" -v me="$$" \
        -v dir="$CLOUD_DIR/" -v guest="guest=$NAME-" '
        $2 == me || /awk -v sessions/ { next }
        index(sessions, " " $1 " ") || index($0, dir) || index($0, guest) {
            $1 = ""; sub(/^ /, ""); print }'
}

function destroy_guests {
    local domain
    virsh -c qemu:///system version > /dev/null 2>&1 || return 0
    for domain in $(virsh -c qemu:///system list --all --name | grep "^$NAME-" || true); do
        log "removing guest $domain"
        virsh -c qemu:///system destroy "$domain" > /dev/null 2>&1 || true
        virsh -c qemu:///system undefine --nvram "$domain" > /dev/null 2>&1 \
            || virsh -c qemu:///system undefine "$domain" > /dev/null 2>&1 || true
    done
}

function down {
    local pidfile names=() kind what left
    if [[ -d "$PIDS" ]]; then
        # The agent first, as devstack's unstack stops it first.
        stop_processes numa-overhead-agent
        for pidfile in "$PIDS"/*.pid; do
            [[ -f "$pidfile" ]] && names+=("$(basename "$pidfile" .pid)")
        done
        stop_processes "${names[@]}"
    fi
    destroy_guests
    if [[ -f "$CREATED" ]]; then
        # Undo in reverse order.
        while read -r kind what <&3; do
            case "$kind" in
                database)
                    log "dropping database $what"
                    mysql_root -e "DROP DATABASE IF EXISTS $what" || true
                    ;;
                dbuser)
                    mysql_root -e "DROP USER IF EXISTS '$what'@'%'" || true
                    ;;
                vhost)
                    log "deleting RabbitMQ vhost $what"
                    rabbitmqctl -q delete_vhost "$what" > /dev/null 2>&1 || true
                    ;;
                rabbituser)
                    rabbitmqctl -q delete_user "$what" > /dev/null 2>&1 || true
                    ;;
                kvm)
                    log "/dev/kvm back to group ${what% *} mode ${what#* }"
                    chgrp "${what% *}" /dev/kvm || true
                    chmod "${what#* }" /dev/kvm || true
                    ;;
                dir)
                    log "removing $what"
                    rm -rf -- "$what"
                    ;;
                daemon)
                    # "name pid": only the daemon this cloud started.
                    if [[ "$(cat "/proc/${what#* }/comm" 2> /dev/null)" != "${what% *}" ]]; then
                        :
                    elif [[ -z "$(virsh -c qemu:///system list --all --name 2> /dev/null | grep -v '^$' || true)" ]]; then
                        log "stopping ${what% *} (started by this cloud)"
                        kill -TERM "${what#* }" || true
                    else
                        log "leaving ${what% *} running: it has other guests"
                    fi
                    ;;
            esac
        done 3< <(tac "$CREATED")
        rm -f "$CREATED"
    fi
    left=$(cloud_processes)
    if [[ -n "$left" ]]; then
        log "ending leftover processes of this cloud:"
        echo "$left" >&2
        # shellcheck disable=SC2046
        kill -KILL $(echo "$left" | cut -d' ' -f1) 2> /dev/null || true
        sleep 1
        left=$(cloud_processes)
        [[ -z "$left" ]] || die "processes of the cloud still run: $left"
    fi
    rm -f "$PIDS/sessions"
    log "cloud down: no process of it runs (logs kept in $LOGS)"
}

function scenario {
    # shellcheck source=/dev/null
    source "$CLOUD_DIR/openrc"
    "$BIN/python" "$TOP/tools/cloud/scenario.py" --cloud-dir "$CLOUD_DIR" \
        --host "$COMPUTE_HOST" --name "$NAME" "$@"
}

function main {
    local command=run
    case "${1:-}" in
        up | down | scenario | run | agent-stop | agent-start)
            command=$1
            shift
            ;;
    esac
    if [[ "$(id -u)" -ne 0 ]]; then
        die "run as root: the cloud runs libvirtd, QEMU and the services as root"
    fi
    case "$command" in
        up) up ;;
        down) down ;;
        scenario) scenario "$@" ;;
        agent-stop)
            plugin_settings
            plugin_phase unstack
            ;;
        agent-start)
            plugin_settings
            plugin_phase stack extra
            ;;
        run)
            local start=$SECONDS
            up
            scenario "$@"
            log "bring-up and scenario: $(elapsed "$start") s"
            ;;
    esac
}

main "$@"
