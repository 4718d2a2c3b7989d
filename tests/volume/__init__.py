"""Tests of volume."""
