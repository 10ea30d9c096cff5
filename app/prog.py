"""The demo's command name, in its parser and every line it prints (below `cli` and `ui`)."""

PROG = "mstta-demo"
