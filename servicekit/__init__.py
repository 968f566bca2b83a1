"""Process plumbing every queuepilot service shares: serving an aiohttp app with limits, flag defaults
from the environment, listen-address parsing, bounded error kinds, the ``--price`` flags (GPU-hour prices) that the report and the
economics rules share.

The floor of the import graph: it imports no other queuepilot package.
"""
