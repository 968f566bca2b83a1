"""Prometheus alert rules written in Python; generated/*.yaml is the committed output."""
