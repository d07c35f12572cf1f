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
# tests/unit/test_devstack.py. The ini* functions really edit the file,
# with devstack's semantics; the others append "name<TAB>arg<TAB>..." to
# $STUB_CALLS. Services listed in $DISABLED_SERVICES (comma-separated) are
# disabled, all others enabled; $STUB_DISTRO is ubuntu or fedora.

function _stub_record {
    local IFS=$'\t'
    echo "$*" >> "$STUB_CALLS"
}

# _stub_ini action file section option [value...]
function _stub_ini {
    "${PYTHON:-python3}" - "$@" <<'PYTHON'
import re
import sys

action, path, section, option = sys.argv[1:5]
values = sys.argv[5:]
try:
    with open(path) as f:
        lines = f.read().splitlines()
except FileNotFoundError:
    lines = []


def section_range():
    start = None
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith('[') and text.endswith(']'):
            if start is not None:
                return start, i
            if text[1:-1] == section:
                start = i
    return (start, len(lines)) if start is not None else (None, None)


def option_lines(start, end):
    pattern = re.compile(r'^%s\s*=' % re.escape(option))
    return [i for i in range(start + 1, end) if pattern.match(lines[i])]


def value_of(i):
    return lines[i].split('=', 1)[1].strip()


start, end = section_range()
found = option_lines(start, end) if start is not None else []
if action == 'get':
    if found:
        print(value_of(found[0]))
    sys.exit(0)
if action == 'getm':
    print(' '.join(value_of(i) for i in found))
    sys.exit(0)
if action == 'comment':
    for i in found:
        lines[i] = '#' + lines[i]
elif action in ('set', 'setm'):
    if start is None:
        lines.extend(['[%s]' % section])
        start = len(lines) - 1
    new = ['%s = %s' % (option, v) for v in values]
    if action == 'set' and found:
        for i in found:
            lines[i] = new[0]
    else:
        for i in reversed(found):
            del lines[i]
        lines[start + 1:start + 1] = new
else:
    sys.exit('unknown action %s' % action)
with open(path, 'w') as f:
    f.write('\n'.join(lines) + '\n')
PYTHON
}

function iniget {
    _stub_ini get "$1" "$2" "$3"
}

function iniget_multiline {
    _stub_ini getm "$1" "$2" "$3"
}

function iniset {
    _stub_ini set "$1" "$2" "$3" "$4"
}

function iniset_multiline {
    _stub_ini setm "$@"
}

# As devstack's: the values already there, then the new ones.
function iniadd {
    local file=$1 section=$2 option=$3
    shift 3
    local values
    read -r -a values <<< "$(iniget_multiline "$file" "$section" "$option")"
    iniset_multiline "$file" "$section" "$option" "${values[@]}" "$@"
}

function inicomment {
    _stub_ini comment "$1" "$2" "$3"
}

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

function trueorfalse {
    local default=$1
    local value=${!2:-}
    case "$value" in
        1 | [yY]es | YES | [tT]rue | TRUE) echo True ;;
        0 | [nN]o | NO | [fF]alse | FALSE) echo False ;;
        *) echo "$default" ;;
    esac
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
