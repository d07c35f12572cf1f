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
# Stand-ins for the devstack functions the plugin calls, for
# tests/unit/test_devstack.py. The ini* functions and trueorfalse are the
# real ones of tools/cloud/devstack-functions.sh; the others append "name<TAB>arg<TAB>..." to
# $STUB_CALLS. Services listed in $DISABLED_SERVICES (comma-separated) are
# disabled, all others enabled; $STUB_DISTRO is ubuntu or fedora.

function _stub_record {
    local IFS=$'\t'
    echo "$*" >> "$STUB_CALLS"
}

# shellcheck source=tools/cloud/devstack-functions.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/cloud/devstack-functions.sh"

function is_service_enabled {
    local service
    for service in "$@"; do
        if [[ ",${DISABLED_SERVICES:-}," != *",$service,"* ]]; then
            return 0
        fi
    done
    return 1
}

function is_ubuntu {
    [[ "${STUB_DISTRO:-ubuntu}" == ubuntu ]]
}

function is_fedora {
    [[ "${STUB_DISTRO:-ubuntu}" == fedora ]]
}

function get_python_exec_prefix {
    echo /usr/local/bin
}

function die {
    _stub_record die "$@"
    exit 1
}

function define_plugin {
    _stub_record define_plugin "$@"
}

function enable_service {
    _stub_record enable_service "$@"
}

function echo_summary {
    _stub_record echo_summary "$@"
}

function warn {
    _stub_record warn "$@"
}

function install_package {
    _stub_record install_package "$@"
}

function setup_develop {
    _stub_record setup_develop "$@"
}

function pip_install {
    _stub_record pip_install "$@"
}

function run_process {
    _stub_record run_process "$@"
}

function stop_process {
    _stub_record stop_process "$@"
}
