"""The OpenAI Batch API: input files stored as documents, batches run across the cluster at
the lowest scheduling priority, results written to output and error files (``api/batches.py``)."""
