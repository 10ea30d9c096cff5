"""The mstta demo: frames from a video, webcam, stream or folder -> CLIP -> MS-TTA -> outputs."""
