"""Pure decision policies: admission (GPU-capacity AdmissionCheck) and scaling (Ray worker groups).

No I/O, no clock, no globals: every function takes the snapshot, the policy, the history and
``now`` and returns a new decision and history.  The controller, the demo and the simulator call
these same functions.
"""
