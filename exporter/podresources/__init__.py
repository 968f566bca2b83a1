"""The kubelet PodResources v1 API: the project's minimal ``api.proto``, its generated stubs
(``make proto``) and an async client (:mod:`exporter.podresources.client`)."""
