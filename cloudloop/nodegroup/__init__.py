"""Node groups from InstanceClasses: the machine-template contract and the renderer.

A provider's ``template.yaml`` (Deckhouse's v2 contract, :mod:`.contract`) turns its InstanceClass
into its InfraMachineTemplate; :mod:`.render` adds the Cluster API MachineDeployment, so a group
of machines can be applied and scaled without Deckhouse's node manager.
"""
