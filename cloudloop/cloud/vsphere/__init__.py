"""The vSphere provider: vCenter through pyvmomi (SOAP) and the tagging REST service.

Node sync, discovery and first-class-disk volumes; tested against vcsim from govmomi.
Only light imports here: the SDK is imported when a driver is built.
"""
