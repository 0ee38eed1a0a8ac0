"""The restart log (--log FILE): one JSON object per line, appended and
flushed as each event happens, so a job that is killed keeps what it wrote.

Events: "start" (the first launch), "restart" (written once the new job
reports its first new step, or ends without one, so that it carries the
seconds to recover), "give_up", "stop" (on request, or on the program's own
error), "superseded" (another launcher took a newer generation of the
checkpoint root) and "finish". docs/UNATTENDED.md lists the fields.
"""
from __future__ import annotations

import datetime
import json
import os
from typing import Optional


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class RestartLog:
    def __init__(self, path: Optional[str]):
        self.path = path
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(self, event: str, **fields) -> dict:
        record = {"event": event, "time": utc_now()}
        record.update(fields)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return record
