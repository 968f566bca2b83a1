"""Signals the controller reads from outside the Kubernetes API (GPU series, Ray dashboards)."""
