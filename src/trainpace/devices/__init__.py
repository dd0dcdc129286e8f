"""What the hardware allows: the cited peak table (:mod:`.specs`), measured ceilings
(:mod:`.ceilings`)."""
