"""One per-frame record for every run: the headless run (`app.pipeline`), the UI's video run
(`app.ui.video`) and the webcam (`app.ui.handlers`) all write a processed frame's outputs here,
the same way: the annotated picture, the running counts, the JSONL row and the MP4 frame.

    record = FrameRecord(counts=summary.update, log=JsonlSink(path), video=VideoSink(out, fps))
    picture = record.write(step)      # a `pipeline.Step`; a frame goes into all outputs or none

Which outputs a run has is the only difference between them: the headless run draws its speed on
the frame (`draw_fps`), the UI keeps the picture for the page (`picture=True`) and counts into its
`History` (with a thumbnail of frames where CLIP and the method disagree).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .annotate import annotate
from .sinks import JsonlSink, VideoSink, prediction_row, shield_interrupts


class FrameRecord:
    """A run's per-frame outputs; `write(step)` records one processed frame in each of them."""

    def __init__(
        self,
        *,
        counts: Callable[[Any], None] | None = None,
        log: JsonlSink | None = None,
        video: VideoSink | None = None,
        picture: bool = False,
        mark: str | None = None,
        bank_limit: int | None = None,
        draw_fps: bool = False,
    ):
        self.counts, self.log, self.video = counts, log, video
        self.picture, self.mark, self.bank_limit, self.draw_fps = picture, mark, bank_limit, draw_fps
        self.rows = 0

    def draw(self, step: Any) -> np.ndarray:
        """The annotated frame (as the page shows it and the MP4 holds it)."""
        return annotate(
            step.frame.image,
            step.result,
            fps=step.fps if self.draw_fps else None,
            bank_limit=self.bank_limit,
            truth=step.truth_label,
            mark=self.mark,
        )

    def write(self, step: Any) -> np.ndarray | None:
        """Record `step` (a `pipeline.Step`): counts, JSONL row and MP4 frame, all or none (Ctrl-C
        waits for the end of the block); the annotated picture when one was drawn."""
        picture = self.draw(step) if (self.picture or self.video is not None) else None
        with shield_interrupts():
            if self.counts is not None:
                self.counts(step)
            if self.log is not None:
                self.log.write(prediction_row(step.frame, step.result, step.truth_label))
            if self.video is not None:
                self.video.write(picture, step.frame.timestamp)
            self.rows += 1
        return picture
