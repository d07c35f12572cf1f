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
"""The installed package's version: what agents report and save."""

import functools

from nova_numa_overhead import report


@functools.lru_cache(maxsize=None)
def version_string() -> str:
    """The version pbr gave the installed distribution, ``unknown``
    where there is none (a source tree not installed) or it would not
    fit a report's ``agent.version`` (printable ASCII, no space, 64
    characters at most).
    """
    try:
        from importlib import metadata
        value = metadata.version('nova-numa-overhead')
    except Exception:
        return 'unknown'
    return value if isinstance(value, str) and \
        0 < len(value) <= report.MAX_TOKEN_LEN and \
        report._TOKEN_RE.fullmatch(value) else 'unknown'
