"""Tests of the cloud contract, the provider records and the conformance of every driver."""
