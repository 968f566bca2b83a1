"""The controller's Kubernetes edge: client set-up, the resource table and the watch caches."""
