"""What an operator runs beside the pipeline: status, verify, export, the reference merge in
Python, and staged-log maintenance."""
