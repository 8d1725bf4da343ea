"""One inference pipeline: where a request runs (``service``) and how it runs here (``local``)."""
