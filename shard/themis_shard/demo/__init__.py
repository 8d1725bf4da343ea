"""The quickstart demo (``themis demo``, ``make demo``): a CC0 corpus of a few hundred factual
paragraphs (``corpus.txt``, parsed by ``corpus``) loaded into the running cluster with embeddings,
then one RAG question and one AQL query (``run``)."""
