"""What the pipeline is about, with no I/O: positions, change events, table schemas, the
staged row format, and the paper's rules on watermark windows."""
