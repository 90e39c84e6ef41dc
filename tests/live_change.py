"""One change to a live index, run under strace by ``test_live_index_kill.py``: ``python live_change.py OP FOLDER``.

Before the change it looks up a file that does not exist (``unlink`` of ``FOLDER.mark``): the trace's marker, so
only the system calls of the change itself are chosen as kill points.
"""

import contextlib
import os
import sys

import numpy as np

from embedkit.index.live import LiveIndex

operation, folder = sys.argv[1], sys.argv[2]
live = LiveIndex.load_live(folder)
rows = np.random.default_rng(0).standard_normal((40, live.dim)).astype(np.float32)
with contextlib.suppress(FileNotFoundError):
    os.unlink(folder + ".mark")
if operation == "add":
    live.add([f"new-{i}" for i in range(40)], rows, metadata=[{"bucket": i} for i in range(40)])
elif operation == "delete":
    live.delete([doc_id for doc_id in live.ids if doc_id is not None][:25])
else:
    live.compact()
LiveIndex.load_live(folder).store.close()  # the last connection's close folds the WAL in: kill points too
live.store.close()
