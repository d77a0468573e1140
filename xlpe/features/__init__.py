"""Text -> model inputs: read and clean parallel text (`corpus`), word-align it (`alignment`), derive the
oracle BTG reorderings and DPE targets (`reordering`), tag parts of speech (`tagging`), train and apply
sub-word tokenizers (`tokenization`), and run it all as one cached, reported preparation (`prepare`, with
its per-example step in `example_features` and the cache in `cache`). `synthetic` is the built-in corpus.

Imports only `xlpe.models` (tag ids) besides its own modules; never training, evaluation or the CLI."""
