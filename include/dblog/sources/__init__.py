"""Source adapters: one per database family, behind the `Source` interface in `base`."""
