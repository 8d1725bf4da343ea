"""``python -m themis_testing.autoscaler adapter|controller ...``"""

import sys

from . import controller, metrics_adapter

if __name__ == "__main__":
    command, rest = (sys.argv[1] if len(sys.argv) > 1 else ""), sys.argv[2:]
    if command == "adapter":
        metrics_adapter.main(rest)
    elif command == "controller":
        controller.main(rest)
    else:
        raise SystemExit("usage: python -m themis_testing.autoscaler adapter|controller [--help]")
