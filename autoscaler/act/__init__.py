"""Actuators: the only code that writes to the API server (Workload / AdmissionCheck status,
RayCluster spec, Events).  Each write is minimal, conflict-safe, counted, and skipped in dry-run."""
