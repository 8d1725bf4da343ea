"""The document service: what every writer of documents shares (the REST routes and AQL)."""
