"""The engine: numbers in, predictions out (no files, no models).

The pure math (`functional`), the cache family's state records and slot rules (`cache`,
`cache_rules`, `boost`), the method families (`families/`, the registry in `methods`, their
hyperparameters in `config`), the two runners (`cache_runner.Streams`, `family_runner.FamilyStreams`),
the public `Engine`/`MultiEngine` (`engine`, `multi`) and `replay`. The map: docs/architecture.md.
"""
