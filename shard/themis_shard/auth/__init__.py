"""API keys and roles for the public API: which route needs which role (``policy``), the hashed
key ring (``keys``) and its typed settings (``settings``). Pure: the HTTP edge is ``api/auth.py``."""
