"""The per-matrix record (.imagebuild/<matrix>.state.json): what was built, tested and pushed. No engine here."""

from imagebuild.record.store import (
    ImageRecord,
    Record,
    load_record,
    new_record,
    now,
    record_path,
    state_dir,
    updating,
)
from imagebuild.record.testkeys import passed_result, store_result, test_key, tested_ok

__all__ = ["ImageRecord", "Record", "load_record", "new_record", "now", "passed_result", "record_path",
           "state_dir", "store_result", "test_key", "tested_ok", "updating"]
