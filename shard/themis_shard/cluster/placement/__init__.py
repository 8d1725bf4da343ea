"""Where data lives: owners and coordinators as pure functions of the plan, the live plan the
other parts read, and the resharding hand-off that moves keys to their new owners.

May import: ``transport``, ``tasks``, ``settings``.
"""
