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
"""A child subreaper for the NUMA VM's daemons (tools/numa-vm.sh).

``python3 tools/subreaper.py NAME...`` starts each daemon not already
running (``NAME -d``), then reaps every process that ends up its child,
forever. The VM's init does not reap orphans: libvirt daemonizes QEMU,
and took a zombie QEMU for a live one, waiting ~40 s per guest destroyed
or capabilities probe.
"""

import ctypes
import os
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(names):
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for name in names:
        if subprocess.run(['pgrep', '-x', name]).returncode:
            subprocess.run([name, '-d'])
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.2)


if __name__ == '__main__':
    main(sys.argv[1:])
