"""One service process: command line, wiring of server plus reconciler, kopf, logs, metrics, acceptance."""
