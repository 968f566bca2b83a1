"""Controller: cluster view, signals, snapshot, pure policies, actuators, webhook, simulator."""
