"""CSI driver tests."""
