"""The namespace -> LocalQueue mapping the webhook under test serves (team-z has none)."""

MAPPING = {"team-a": "team-a-queue", "team-b": "lq-b"}
