"""MLflow's HTTP calls with short timeouts and bounded retries (`bounded_http`), for every MLflow call this
package makes where a person waits: the review page's label sink at start and per label. Only the standard
library: MLflow reads these settings from the environment at each request."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["HTTP_BOUNDS", "bounded_http"]

# MLflow's defaults (120 s a request, 7 retries with a backoff factor of 2) make a dead server take ~4 minutes
# a call. Under `bounded_http`: a request waits at most 5 s and is tried twice, without backoff before the
# retry (urllib3 sleeps only from the second retry on), so a call ends within about 10 s.
HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0"}
_bounds_lock = threading.Lock()
_bounds_users = 0
_bounds_set: dict[str, str] = {}


@contextmanager
def bounded_http() -> Iterator[None]:
    """Run MLflow calls with short HTTP timeouts and bounded retries (`HTTP_BOUNDS`).

    MLflow reads ``MLFLOW_HTTP_REQUEST_TIMEOUT``, ``..._MAX_RETRIES``, ``..._BACKOFF_FACTOR`` and
    ``..._BACKOFF_JITTER`` from ``os.environ`` at each request and takes no per-client setting, so the
    bounds are put in the environment on entry and taken out when the last thread inside leaves. A variable
    the user has set is left as it is (theirs wins); one the user sets meanwhile is not removed. While a
    call runs under it, another thread's MLflow requests in the same process get the same bounds; the
    command line makes no other MLflow calls meanwhile.
    """
    global _bounds_users
    with _bounds_lock:
        if _bounds_users == 0:
            _bounds_set.clear()
            _bounds_set.update({k: v for k, v in HTTP_BOUNDS.items() if k not in os.environ})
            os.environ.update(_bounds_set)
        _bounds_users += 1
    try:
        yield
    finally:
        with _bounds_lock:
            _bounds_users -= 1
            if _bounds_users == 0:
                for name, value in _bounds_set.items():
                    if os.environ.get(name) == value:
                        del os.environ[name]
                _bounds_set.clear()
