"""The mstta demo: frames from a video, webcam, stream or folder -> CLIP -> MS-TTA -> outputs.

One-way flow, one small module per stage:
    frames.py    check_frame_size, decode_image, shrink: no frame above --max-pixels (or beyond 16:1) is
                 decoded whole
    sources.py   open_source(spec) -> Source of Frame(index, timestamp, image RGB, source); the kinds
                 live in source_base.py (Frame, Source), file_sources.py (video file, image folder)
                 and live_source.py (webcam, stream URL)
    inputs.py    read_small_file(path, flag, limit): labels/truth as bounded regular files (no FIFO, no /dev/zero)
    sampling.py  Sampler(every): which frames of a file reach the encoder
    labels.py    read_labels(path) / parse_labels(text), prompt_templates(template)
    encoder.py   FrameEncoder(clip, views): RGB frames -> CLIP features (the model's open_clip
                 transform and mstta.features.views crops, as the benchmark; views encoded in chunks)
    session.py   StreamSession: classifier + encoder + engine; process(rgb) -> FrameResult
    forgetting.py  --forget / "Forget old scenes" onto EngineConfig.forget; raced entries NAME@CHOICE (Racer)
    annotate.py  annotate(rgb, result) -> annotated RGB frame
    sinks.py     VideoSink (H.264 via PyAV), JsonlSink, prediction_row; atomic, valid when interrupted
    record.py    FrameRecord: a processed frame's outputs (picture, counts, JSONL row, MP4 frame), the
                 one per-frame record of the headless run, the UI's video runs and the webcam
    truth.py     read_truth(path, labels): frame ranges -> class, for accuracy
    summary.py   RunSummary, format_summary: end-of-run numbers
    progress.py  Progress: tqdm bar or plain lines on stderr for headless runs
    pacing.py    Pacer: real-time playback (the UI's video runs skip frames the model cannot keep up with)
    bundled.py   --bundled-demo: CLIP's clip when its weights are cached, else the bundled digits demo
    pipeline.py  DemoConfig, config_from_args (the flags -> DemoConfig, headless and UI), prepare(cfg),
                 iter_steps / step_once (the one frame loop and its step, under the UI and the webcam
                 too), run_pipeline(cfg) -> summary dict (the headless demo)
    cli.py       `mstta-demo`
    ui/          the browser UI (layout, handlers, serving) over the same pipeline
"""
