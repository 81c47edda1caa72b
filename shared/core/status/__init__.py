"""What a class offers: capacity per node, availability and conditions, the admission
catalog built from a snapshot, and vGPU entitlement.
"""
