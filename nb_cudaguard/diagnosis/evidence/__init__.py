"""Where the diagnosis looks: the user's objects, the source they wrote, and the error's own text.

* ``workspace``: tensors, modules, configs, tokenizers and datasets in the failing frames and the namespace,
  recognised by duck typing (Hugging Face objects without importing transformers);
* ``static``: facts read from the cell, the journal and ``--code`` by the ``ast`` module, never by running them;
* ``textual``: what the error text and the traceback's lines say about the op that failed;
* ``classes``, ``embeddings``, ``indexing``, ``losses``: one analyser per group of cause families, each turning
  the above into Causes with their Evidence.
"""
