"""A job: the runs (processes) that continue one training across restarts, and its ledger.

See :mod:`trainpace.job.events` for the ledger's format.
"""
