"""Tests of the Ray signal (autoscaler.signals.ray_demand / ray_parse)."""
