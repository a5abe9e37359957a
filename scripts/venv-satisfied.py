"""Exit 0 when every `name==version` line of the requirements file given is installed at
that version in this interpreter's environment, 1 otherwise (scripts/setup.sh then runs
pip). About 30 ms, against about a second for `pip install` finding nothing to do."""

import sys
from importlib import metadata


def satisfied(path):
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        try:
            if metadata.version(name.strip()) != version.strip():
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


sys.exit(0 if satisfied(sys.argv[1]) else 1)
