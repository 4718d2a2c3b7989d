"""Provider-neutral cloud-controller-manager rules (pure functions on Node dicts)."""
