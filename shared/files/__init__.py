"""Kubernetes objects from files: finding and stamping them (`filesource`), the guards on a parsed
document's shape (`docshape`) and the loader that turns them into what an API server would hold.
It imports the core and never a shell.
"""
