"""Tests of registration."""
