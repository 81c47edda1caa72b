"""The seam between the reconciler and the API server.

`port` is the Protocol (`KubeAPI`) and the values that cross it; `client` the real
adapter over HTTP; `fake` an API server in a dict (the offline twin's and the tests');
`dryrun` a wrapper that records every write, redacted, and may hold it back.
"""
