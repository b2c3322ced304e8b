"""poolwright provider plug-in: node pools as plain EC2 instances.

Modules, platform-neutral first:
  protocol.py  wire checks and RFC 9457 problems
  store.py     SQLite: pool records, idempotency keys, launch records
  pools.py     the operations: key gate, plans, resume, quota, per-pool locks
  server.py    HTTP: routes, bearer token, limits
  backend.py   the interface a platform implements
  ec2.py       the EC2 implementation (the only AWS-specific file)
"""
