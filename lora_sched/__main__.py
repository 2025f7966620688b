"""`python -m lora_sched`: the `lora-sched` command (for a venv whose scripts name another interpreter)."""

import sys

from lora_sched.cli import main

sys.exit(main())
