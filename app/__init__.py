"""The mstta demo: frames from a video, webcam, stream or folder -> CLIP -> MS-TTA -> outputs.

One-way flow, one small module per stage:
    sources.py   open_source(spec) -> Source of Frame(index, timestamp, image RGB, source)
    sampling.py  Sampler(every): which frames of a file reach the encoder
    labels.py    read_labels(path) / parse_labels(text), templates_for(template)
    encoder.py   FrameEncoder(clip, views): RGB frames -> CLIP features (batched, on device)
    session.py   StreamSession: classifier + encoder + engine; process(rgb) -> FrameResult
    annotate.py  annotate(rgb, result) -> annotated RGB frame
    sinks.py     VideoSink (H.264 via PyAV), JsonlSink, prediction_row; atomic, valid when interrupted
    truth.py     read_truth(path, labels): frame ranges -> class, for accuracy
    summary.py   RunSummary, format_summary: end-of-run numbers
    pipeline.py  DemoConfig, run_pipeline(cfg) -> summary dict (the headless demo)
    cli.py       `mstta-demo`
"""
