"""Features and models: images to feature files.

CLIP models and their weights (`models`, `weights`), the views (`views`, `tensor_views`,
`fast_views`, `decode`), extraction (`extract`, `extract_views`, `extract_encode`, `shards`) and the
feature-file format (`format`: `load_features`, `save_features`). The map: docs/architecture.md.
"""
