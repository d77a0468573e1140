"""The console scripts, one module each (argument parsing and error reporting; the work happens in the
library): xlpe-prepare, xlpe-train, xlpe-translate, xlpe-evaluate, xlpe-push, xlpe-demo."""
