"""Coordination through ZooKeeper: the store (the only kazoo user), the capture checkpoint, the
watermark index, writes logged without rows, and the capture's health."""
