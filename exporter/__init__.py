"""Node agent: samples GPUs, attributes them to pods, classifies health, serves /metrics."""
