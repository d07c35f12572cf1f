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
# Devstack's functions that the devstack plugin calls and that behave the
# same everywhere, with devstack's semantics, for the plugin's functions
# when they run outside devstack: in tools/cloud (the one-machine cloud)
# and in tests/unit/test_devstack.py. The ini functions (inc/ini-config)
# edit with one Python helper ($PYTHON picks the interpreter); trueorfalse
# is functions-common's.

# _ini_config action file section option [value...]
function _ini_config {
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
elif action == 'delete':
    for i in reversed(found):
        del lines[i]
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
    _ini_config get "$1" "$2" "$3"
}

function iniget_multiline {
    _ini_config getm "$1" "$2" "$3"
}

function iniset {
    _ini_config set "$1" "$2" "$3" "$4"
}

function iniset_multiline {
    _ini_config setm "$@"
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
    _ini_config comment "$1" "$2" "$3"
}

function inidelete {
    _ini_config delete "$1" "$2" "$3"
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
