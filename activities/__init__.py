"""Side effects: cloud calls through the configured driver, and Kubernetes API calls.

Activities are synchronous (the SDKs block) and run in the worker's thread pool. Each module
groups a collaborator's activities on a class whose instance holds the collaborator.
"""
