"""Grafana dashboards as grafanalib code; generated/*.json is the committed output."""
