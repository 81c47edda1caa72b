"""The webhook's own CA (chart default): the pure rotation plan (`rotation`), issuing
keys and certificates (`issue`), the served TLS context (`tls`) and the loop that reads
the Secret and the webhook configurations and carries out the plan (`rotator`).
"""
