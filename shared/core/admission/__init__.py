"""Admission: the AdmissionReview envelope, one admitter per kind, the rules of contract
section 4, narrow patches, and decisions with their one renderer.
"""
