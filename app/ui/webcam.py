"""The webcam run of a session as one object (as `video._Run` is a video's); the handlers in
`app.ui.handlers` drive it.

    ui.webcam.frames, ui.webcam.recording    # frames processed in the run, its downloads being written
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class WebcamRun:
    """The session's webcam run (as `video._Run` is a video's): its frames, its clock, its recording,
    and how it ended. The webcam handlers in `app.ui.handlers` drive it."""

    frames: int = 0  # frames processed in this run
    started: float = 0.0  # monotonic time of the run's first frame
    last: float = 0.0  # ... and of its latest one (the run ends when they stop coming)
    recording: Any = None  # the run's downloads being written (`Downloads.start`)
    stopped: float = 0.0  # when the camera's Stop was pressed (frames still in flight are dropped)
    ended: dict | None = None  # the page of a run the server ended, for the page's timer

    def close(self) -> None:
        """Let go of the recording and the ended page (the session's folder deletes the files)."""
        self.frames, self.recording, self.ended = 0, None, None
