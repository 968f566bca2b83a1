"""Actuators: the only code that writes to the API server (Workload / AdmissionCheck status,
RayCluster spec, Events).  Each write is minimal, conflict-safe and counted.  In dry-run (shadow
mode) only what keeps Kueue admitting as it would without queuepilot is written (the check's
``Active`` condition, every check entry ``Ready``) plus Events; RayClusters are never patched."""
