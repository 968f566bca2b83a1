"""``queuepilot report``: GPU economics per team and right-sizing per worker group, read from Prometheus."""
