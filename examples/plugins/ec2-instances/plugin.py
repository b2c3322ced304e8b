#!/usr/bin/env python3
"""Run the ec2-instances plug-in: `python3 plugin.py --help`.
(Same as `python3 -m ec2_instances` from this directory.)"""

import sys

from ec2_instances.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
