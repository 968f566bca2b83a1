"""queuepilot: GPU-, queue- and Ray-aware admission and autoscaling for Kueue + KubeRay clusters."""

__version__ = "0.1.0"
