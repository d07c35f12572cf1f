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
# plugin.sh - devstack plugin of nova-numa-overhead: dispatches the phases
# of stack.sh, unstack.sh and clean.sh to lib/nova_numa_overhead.

# Save trace setting
_XTRACE_NOVA_NUMA_OVERHEAD=$(set +o | grep xtrace)
set +o xtrace

# shellcheck source=devstack/lib/nova_numa_overhead
source "$NUMA_OVERHEAD_DIR/devstack/lib/nova_numa_overhead"

if [[ "$1" == "stack" ]]; then
    case "$2" in
        install)
            echo_summary "Installing nova-numa-overhead"
            install_nova_numa_overhead
            ;;
        post-config)
            # Before Nova starts: the scheduler reads nova.conf once.
            echo_summary "Configuring nova-numa-overhead"
            configure_nova_numa_overhead
            ;;
        extra)
            if is_service_enabled numa-overhead-agent; then
                echo_summary "Starting nova-numa-overhead-agent"
                start_nova_numa_overhead
            fi
            ;;
    esac
fi

if [[ "$1" == "unstack" ]]; then
    stop_nova_numa_overhead
fi

if [[ "$1" == "clean" ]]; then
    cleanup_nova_numa_overhead
fi

# Restore xtrace
$_XTRACE_NOVA_NUMA_OVERHEAD
