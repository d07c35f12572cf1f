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
"""Integration tests: RabbitMQ, real syscalls, the agent service in-process.

The agent runs on oslo.service's threading backend; it is chosen here,
before any test module imports oslo.messaging (whose server side asks for
a backend and would otherwise get eventlet's, whose loops never run in a
threaded test process).
"""

from oslo_service import backend
from oslo_service.backend import exceptions as backend_exceptions

try:
    backend.init_backend(backend.BackendType.THREADING)
except backend_exceptions.BackendAlreadySelected:
    pass
